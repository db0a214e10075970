"""Lore toolkits end to end: a real appliance, the official SDK client through the bridge.

A knowledge base of public documents (tests/fixtures/lore: the US Constitution, the
Declaration of Independence as HTML, the Gettysburg Address as PDF, RFC 2119, PEP 20) is
imported with the CLI beside a serving appliance and uploaded as an archive through the
admin API; agents find passages whose words appear in one document only, list and read,
within their grants and the toolkit's quota; editing a file and importing again changes the
answer; bad uploads are refused with a report and store nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from tests.support.accounts import api, ok
from tests.support.clients import connect
from tests.support.servers import REPO, Appliance, cli, running_appliance

pytestmark = pytest.mark.e2e
LORE = REPO / "tests" / "fixtures" / "lore"


@dataclasses.dataclass
class World:
    app: Appliance
    kb: Path  # the knowledge base folder the operator imports as `kb`
    keys: dict[str, str]  # alice (a user), reader (her agent, granted search only), idle (no grant)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def zipped(root: Path, extra: dict[str, bytes] | None = None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                z.write(path, path.relative_to(root).as_posix())
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return out.getvalue()


def import_kb(app: Appliance, kb: Path, *args: str) -> dict[str, Any]:
    done = cli(app.data_dir, "import", "lore", str(kb), "--slug", "kb", "--json", *args)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


async def use(client: Any, tool: str, **arguments: Any) -> Any:
    result = await client.call_tool("use_tool", {"tool": tool, "input": arguments})
    assert result.is_error is False, result.content[0].text
    return json.loads(result.content[0].text)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("lore")
    kb = base / "kb"
    shutil.copytree(LORE, kb, ignore=shutil.ignore_patterns("SOURCES.md"))
    env = {"TOOLSPOKE_DEMO": "0", "TOOLSPOKE_DEFAULT_FEE": "0"}
    with running_appliance(base / "data", env=env) as app:
        report = import_kb(app, kb)
        assert report["documents"]["count"] == 6 and report["tool_count"] == 3
        keys: dict[str, str] = {}
        with api(app) as admin:
            uid = ok(admin.post("/api/v1/users", json={"name": "alice"}), 201)["id"]
            keys["alice"] = ok(admin.post("/api/v1/keys", json={"user_id": uid, "name": "own"}), 201)["key"]
        with api(app, keys["alice"]) as alice:
            up = alice.post(
                "/api/v1/toolkits/lore?slug=alicekb",
                content=zipped(kb),
                headers={"Content-Type": "application/zip"},
            )
            assert ok(up, 201)["documents"]["count"] == 6
            for agent, tools in (("reader", ["alicekb__search_lore"]), ("idle", None)):
                aid = ok(alice.post("/api/v1/agents", json={"name": agent}), 201)["id"]
                keys[agent] = ok(alice.post("/api/v1/keys", json={"agent_id": aid}), 201)["key"]
                if tools is not None:
                    grant = {"agent_id": aid, "toolkit": "alicekb", "tools": tools}
                    ok(alice.post("/api/v1/grants", json=grant), 201)
        yield World(app, kb, keys)


def test_an_agent_finds_the_one_passage_lists_the_documents_and_reads_a_range(world: World) -> None:
    async def scenario() -> None:
        async with connect(world.app) as client:
            found = await client.call_tool("search_tools", {"query": "search the knowledge base passages"})
            assert "kb__search_lore" in {r["name"] for r in found.structured_content["results"]}
            # Words found in Article I, Section 2 of the Constitution and nowhere else.
            hits = await use(
                client, "kb__search_lore", query="What Qualifications requisite must Electors have?"
            )
            best = hits["passages"][0]
            assert best["path"] == "constitution.md"
            assert best["heading"] == "The Constitution of the United States > Article I > Section 2"
            assert "«Qualifications»" in best["snippet"]
            pdf = (await use(client, "kb__search_lore", query="fourscore? Four score and seven years ago"))[
                "passages"
            ]
            assert pdf[0]["path"] == "gettysburg.pdf"
            html = (await use(client, "kb__search_lore", query="unalienable", limit=1))["passages"]
            assert [p["path"] for p in html] == ["declaration.html"]
            listed = await use(client, "kb__list_documents")
            assert listed["total"] == 6 and "gettysburg.pdf" in [d["path"] for d in listed["documents"]]
            read = await use(
                client, "kb__read_document", id=best["document_id"], offset=best["offset"], length=120
            )
            assert read["text"].startswith("### Section 2") and read["length"] == 120
            guide = await client.call_tool("read_guide", {"toolkit": "kb"})
            assert "Cite the document path" in guide.content[0].text

    run(scenario())


def test_a_grant_of_search_alone_lets_an_agent_search_and_nothing_more(world: World) -> None:
    async def scenario() -> None:
        async with connect(dataclasses.replace(world.app, key=world.keys["reader"])) as reader:
            hits = await use(reader, "alicekb__search_lore", query="Readability counts")
            assert hits["passages"][0]["path"] == "python/zen.md"
            refused = await reader.call_tool(
                "use_tool", {"tool": "alicekb__read_document", "input": {"id": 1}}
            )
            assert refused.is_error and refused.meta["toolspoke/reason"] == "tool_not_found"
            other = await reader.call_tool("use_tool", {"tool": "kb__search_lore", "input": {"query": "x"}})
            assert other.is_error  # the operator's toolkit is not granted to alice's agent
        async with connect(dataclasses.replace(world.app, key=world.keys["idle"])) as idle:
            found = await idle.call_tool("search_tools", {"query": "knowledge base passages"})
            assert found.structured_content["results"] == []

    run(scenario())


def test_the_toolkits_daily_quota_applies_to_its_lore_tools(world: World) -> None:
    with api(world.app) as admin:  # quotas are an admin's to set
        ok(admin.put("/api/v1/toolkits/alicekb/quota", json={"daily_limit": 2}))

    async def scenario() -> list[Any]:
        outcomes: list[Any] = []
        async with connect(dataclasses.replace(world.app, key=world.keys["reader"])) as reader:
            for _ in range(3):  # the grant test spent one call of today's two
                try:
                    args = {"tool": "alicekb__search_lore", "input": {"query": "Liberty"}}
                    outcomes.append(await reader.call_tool("use_tool", args))
                except MCPError as exc:
                    outcomes.append(exc)
        return outcomes

    results = run(scenario())  # the later tests use the operator's toolkit, not this one
    refused = [r for r in results if isinstance(r, MCPError)]
    assert len(refused) == 2 and not results[0].is_error
    assert all(r.data["reason"] == "quota_exhausted" for r in refused)
    with api(world.app, world.keys["alice"]) as alice:
        calls = ok(alice.get("/api/v1/toolkits/alicekb/calls"))["calls"]
    assert {"ok", "quota"} <= {c["outcome"] for c in calls}  # audited like any call


def test_importing_again_after_an_edit_changes_the_answer(world: World) -> None:
    async def ask() -> list[str]:
        async with connect(world.app) as client:
            hits = await use(client, "kb__search_lore", query="quasquicentennial")
            return [p["path"] for p in hits["passages"]]

    assert run(ask()) == []
    rfc = world.kb / "rfc2119.txt"
    rfc.write_text(rfc.read_text().replace("truly optional.", "truly optional, even at a quasquicentennial."))
    report = import_kb(world.app, world.kb)
    assert report["documents"]["changed"] == ["rfc2119.txt"] and len(report["documents"]["unchanged"]) == 5
    assert run(ask()) == ["rfc2119.txt"]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"../../escape.md": b"# out"}, "climbs out"),
        ({"scan.pdf": b"%PDF-1.4 not really"}, "cannot be read"),
    ],
)
def test_a_bad_upload_is_refused_with_a_report_and_stores_nothing(
    world: World, extra: dict[str, bytes], words: str
) -> None:
    with api(world.app, world.keys["alice"]) as alice:
        before = ok(alice.get("/api/v1/toolkits"))
        r = alice.post("/api/v1/toolkits/lore?slug=badkb", content=zipped(world.kb, extra))
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["reason"] == "import_failed" and words in error["message"] and error["field"] == "source"
        if "unreadable" in error:
            assert error["unreadable"] == [{"where": "scan.pdf", "reason": error["unreadable"][0]["reason"]}]
        assert ok(alice.get("/api/v1/toolkits")) == before
        assert alice.post("/api/v1/toolkits/lore?slug=badkb", json={"files": []}).status_code == 422
        not_archive = alice.post("/api/v1/toolkits/lore?slug=badkb", content=b"plain words")
        assert not_archive.status_code == 422 and "neither a .zip" in not_archive.json()["error"]["message"]
