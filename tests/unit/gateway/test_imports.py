"""Imports with nothing usable are refused before anything is stored, with the skipped report;
a dry run looks without needing a base URL. In-process, on a real database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import pytest

from appliance.errors import ImportFailed
from appliance.gateway import imports
from appliance.gateway.runtime import Runtime
from tests.support.runtimes import on_runtime
from tests.support.servers import FIXTURES

T = TypeVar("T")
WEBHOOKS = FIXTURES / "oai-v3.1-webhook-example.yaml"  # webhooks only: no operation at all
PETSTORE = FIXTURES / "oai-v3.0-petstore.yaml"
BASE = "https://api.example.com/v1"


async def tool_names(rt: Runtime, slug: str) -> list[str]:
    async with rt.db.read() as conn:
        rows = await conn.all(
            "SELECT t.name FROM tools t JOIN toolkits k ON k.id = t.toolkit_id WHERE k.slug = ?", (slug,)
        )
    return sorted(r[0] for r in rows)


def broken_spec(n: int) -> bytes:
    """``n`` operations, each referring to a parameter that does not exist."""
    bad = [{"$ref": "#/components/parameters/missing"}]
    paths = {
        f"/p{i}": {"get": {"parameters": bad, "responses": {"200": {"description": "ok"}}}} for i in range(n)
    }
    return json.dumps({"openapi": "3.0.3", "info": {"title": "b", "version": "1"}, "paths": paths}).encode()


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_spec_without_any_operation_is_refused_and_nothing_is_stored(tmp_path: Path, dry_run: bool) -> None:
    async def work(rt: Runtime) -> tuple[ImportFailed, list[Any]]:
        with pytest.raises(ImportFailed) as caught:
            await imports.import_openapi(rt, str(WEBHOOKS), slug="hooks", base_url=BASE, dry_run=dry_run)
        async with rt.db.read() as conn:
            kits = await conn.all("SELECT slug FROM toolkits WHERE slug = 'hooks'")
        return caught.value, list(kits)

    error, kits = on_runtime(tmp_path, work)
    assert "no usable operation" in error.public_message
    assert error.data == {"skipped": [], "skipped_count": 0}
    assert kits == []


def test_a_refusal_reports_every_skipped_operation_up_to_a_bound(tmp_path: Path) -> None:
    async def work(rt: Runtime) -> ImportFailed:
        with pytest.raises(ImportFailed) as caught:
            await imports.import_openapi(rt, "b.json", slug="b", base_url=BASE, data=broken_spec(120))
        return caught.value

    error = on_runtime(tmp_path, work)
    assert "all 120 skipped" in error.public_message
    assert error.data["skipped_count"] == 120
    assert len(error.data["skipped"]) == imports.REFUSAL_SKIPPED_MAX
    assert error.data["skipped"][0] == {
        "where": "GET /p0",
        "reason": "parameter 0: $ref '#/components/parameters/missing' does not resolve",
    }


def test_replacing_a_toolkit_with_an_empty_spec_keeps_the_toolkit(tmp_path: Path) -> None:
    async def work(rt: Runtime) -> tuple[list[str], list[str]]:
        await imports.import_openapi(rt, str(PETSTORE), slug="pets", base_url=BASE)
        before = await tool_names(rt, "pets")
        with pytest.raises(ImportFailed):
            await imports.import_openapi(rt, str(WEBHOOKS), slug="pets", base_url=BASE, replace=True)
        return before, await tool_names(rt, "pets")

    before, after = on_runtime(tmp_path, work)
    assert len(before) == 3
    assert after == before


def test_an_empty_catalogue_is_refused_and_a_replace_keeps_the_old_one(tmp_path: Path) -> None:
    full = tmp_path / "c.jsonl"
    full.write_text(json.dumps({"toolkit": "k", "name": "a", "description": "d", "input_schema": {}}) + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")

    async def work(rt: Runtime) -> list[str]:
        await imports.import_catalog(rt, str(full), slug="cat")
        for dry_run in (True, False):
            with pytest.raises(ImportFailed, match="no tool definition"):
                await imports.import_catalog(rt, str(empty), slug="cat", replace=True, dry_run=dry_run)
        return await tool_names(rt, "cat")

    assert on_runtime(tmp_path, work) == ["cat__a"]


def test_a_dry_run_needs_no_base_url_and_says_saving_will(tmp_path: Path) -> None:
    spec = json.loads(broken_spec(0))
    spec["paths"] = {"/a": {"get": {"operationId": "getA", "responses": {"200": {"description": "ok"}}}}}

    async def work(rt: Runtime) -> tuple[imports.ImportReport, ImportFailed]:
        data = json.dumps(spec).encode()
        report = await imports.import_openapi(rt, "a.json", slug="a", data=data, dry_run=True)
        with pytest.raises(ImportFailed) as caught:
            await imports.import_openapi(rt, "a.json", slug="a", data=data)
        return report, caught.value

    report, refused = on_runtime(tmp_path, work)
    assert [t["name"] for t in report.tools] == ["a__getA"]
    assert report.base_url is None
    assert any("needs --base-url" in note for note in report.notes)
    assert refused.field == "base_url"  # saving still needs it
