"""Lexical search against a real temporary database: ranking, filters, hostile text."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from appliance.db.connection import Database, dumps
from appliance.search import fts

MIGRATIONS = Path(__file__).resolve().parents[3] / "migrations"
T = TypeVar("T")

TOOLS: list[tuple[str, str, str, str, dict[str, Any]]] = [
    # (toolkit slug, upstream name, group, description, input schema)
    ("petstore", "getPetById", "pets", "Returns a single pet.", {"properties": {"petId": {}}}),
    ("petstore", "listPets", "pets", "Returns all pets from the store.", {"properties": {"limit": {}}}),
    ("petstore", "pet_by_id_lookup_helper", "pets", "Pet by id: get pet by id, pet id, by id, get pet.", {}),
    ("github", "list_issues", "issues", "List issues in a repository.", {"properties": {"repo": {}}}),
    ("github", "create_issue", "issues", "Open a new issue.", {"properties": {"title": {}}}),
    ("weather", "current_weather", "forecast", "Current weather for a city.", {"properties": {"city": {}}}),
    # Unrelated neighbours, so that "pet" is not in half the catalogue (BM25's IDF floors there).
    ("github", "merge_pull_request", "pulls", "Merge a pull request.", {"properties": {"number": {}}}),
    ("github", "get_file_contents", "repos", "Read a file from a repository.", {"properties": {"path": {}}}),
    ("mail", "sendMessage", "messages", "Send an email message.", {"properties": {"to": {}}}),
    ("mail", "searchInbox", "messages", "Search the inbox.", {"properties": {"query": {}}}),
    ("calendar", "createEvent", "events", "Create a calendar event.", {"properties": {"start": {}}}),
    ("calendar", "listCalendars", "calendars", "Calendars the user can see.", {}),
]


def run(db_test: Callable[[Database, dict[str, int]], Awaitable[T]], tmp_path: Path) -> T:
    async def main() -> T:
        db = Database(tmp_path / "t.db")
        await db.open(MIGRATIONS)
        try:
            ids = await _load(db)
            return await db_test(db, ids)
        finally:
            await db.close()

    return asyncio.run(main())


async def _load(db: Database) -> dict[str, int]:
    ids: dict[str, int] = {}
    async with db.write() as tx:
        other = await tx.run("INSERT INTO projects (slug) VALUES ('other')")
        kits: dict[str, int] = {}
        rows = []
        for slug, upstream, group, description, schema in TOOLS:
            if slug not in kits:
                project = other if slug == "weather" else 1
                kits[slug] = await tx.run(
                    "INSERT INTO toolkits (project_id, slug, source_kind) VALUES (?, ?, 'openapi')",
                    (project, slug),
                )
            name = f"{slug}__{upstream}"
            tool_id = await tx.run(
                "INSERT INTO tools (toolkit_id, name, upstream_name, grp, description, kind, input_schema)"
                " VALUES (?, ?, ?, ?, ?, 'read', ?)",
                (kits[slug], name, upstream, group, description, dumps(schema)),
            )
            ids[upstream] = tool_id
            rows.append(fts.IndexRow(tool_id, name, slug, group, description, schema, upstream_name=upstream))
        await fts.index_tools(tx, rows)
    return ids


async def _ids(db: Database, query: str, **kw: Any) -> list[int]:
    async with db.read() as conn:
        return [i for i, _ in await fts.search(conn, query, limit=kw.pop("limit", 10), **kw)]


def test_an_exact_tool_name_ranks_first_even_when_others_repeat_its_words(tmp_path: Path) -> None:
    async def check(db: Database, ids: dict[str, int]) -> None:
        for query in ("petstore__getPetById", "getPetById", "  GETPETBYID "):
            assert (await _ids(db, query))[0] == ids["getPetById"], query
        assert (await _ids(db, "get pet by id"))[0] == ids["pet_by_id_lookup_helper"]

    run(check, tmp_path)


def test_toolkit_and_project_filters_limit_the_results(tmp_path: Path) -> None:
    async def check(db: Database, ids: dict[str, int]) -> None:
        github = await _ids(db, "list issues pets", toolkit="github")
        assert github[0] == ids["list_issues"]
        assert set(github) <= {
            ids[n] for n in ("list_issues", "create_issue", "merge_pull_request", "get_file_contents")
        }
        assert ids["listPets"] in await _ids(db, "list")
        assert await _ids(db, "weather city", project="default") == []
        assert await _ids(db, "weather city", project="other") == [ids["current_weather"]]
        kit = await _ids(db, "issue", allowed_toolkit_ids=[])
        assert kit == []

    run(check, tmp_path)


def test_a_query_of_only_punctuation_returns_nothing_rather_than_failing(tmp_path: Path) -> None:
    async def check(db: Database, ids: dict[str, int]) -> None:
        for query in ("", "   ", '"', "*", "()", '" OR "', "NEAR(", "\x00", "🙂🙂"):
            assert await _ids(db, query) == [], query

    run(check, tmp_path)


def test_camel_case_finds_snake_case_and_snake_case_finds_camel_case(tmp_path: Path) -> None:
    async def check(db: Database, ids: dict[str, int]) -> None:
        assert (await _ids(db, "listIssues"))[0] == ids["list_issues"]
        assert (await _ids(db, "current weather"))[0] == ids["current_weather"]
        assert (await _ids(db, "list_pets"))[0] == ids["listPets"]

    run(check, tmp_path)


def test_stemming_finds_list_pets_from_listing_pets(tmp_path: Path) -> None:
    async def check(db: Database, ids: dict[str, int]) -> None:
        assert (await _ids(db, "listing pets"))[0] == ids["listPets"]

    run(check, tmp_path)


def test_unindexed_tools_are_no_longer_found_and_reindexing_replaces(tmp_path: Path) -> None:
    async def check(db: Database, ids: dict[str, int]) -> None:
        async with db.write() as tx:
            await fts.unindex(tx, [ids["create_issue"]])
            row = fts.IndexRow(
                ids["listPets"], "petstore__listPets", "petstore", "pets", "Kennel roster", "{}"
            )
            await fts.index_tools(tx, [row])
        assert await _ids(db, "open") == []
        assert await _ids(db, "kennel") == [ids["listPets"]]

    run(check, tmp_path)
