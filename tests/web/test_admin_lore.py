"""The Lore upload route (``POST /api/v1/toolkits/lore``), in process: what it refuses before
reading an archive, naming the field, and a dry run that stores nothing; a Lore toolkit's fee
is charged and audited like any toolkit's."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.accounts import (
    add_user_keys,
    admin,
    as_key,
    assert_charges_match_audit,
    credits_path,
    query,
    run,
    user_id,
)
from tests.support.clients import connect
from tests.support.inprocess import InProcess, served_in_process

pytestmark = pytest.mark.inprocess


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    env = {"TOOLSPOKE_DEMO": "0", "TOOLSPOKE_IMPORTS_PER_HOUR": "1000"}
    with served_in_process(tmp_path_factory.mktemp("lore") / "data", env=env) as served:
        yield served


@pytest.fixture
def api(app: InProcess) -> Iterator[httpx.Client]:
    with app.client(headers={"Authorization": f"Bearer {app.key}"}, timeout=60) as c:
        yield c


def archive(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return out.getvalue()


@pytest.mark.parametrize(
    ("query", "body", "headers", "field"),
    [
        ("", archive({"a.md": "# a"}), {}, "slug"),
        ("?slug=kb", b"", {}, "body"),
        ("?slug=kb", b'{"files": []}', {"Content-Type": "application/json"}, "body"),
        ("?slug=kb&dry_run=perhaps", archive({"a.md": "# a"}), {}, "dry_run"),
        ("?slug=Not+A+Slug", archive({"a.md": "# a"}), {}, "slug"),
        ("?slug=kb", b"PK\x03\x04 not a zip", {}, "source"),
        ("?slug=kb&title=%07", archive({"a.md": "# a"}), {}, "title"),
    ],
)
def test_a_bad_request_is_refused_naming_the_field(
    api: httpx.Client, query: str, body: bytes, headers: dict[str, str], field: str
) -> None:
    r = api.post(f"/api/v1/toolkits/lore{query}", content=body, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field
    assert all(k["slug"] != "kb" for k in api.get("/api/v1/toolkits").json()["toolkits"])


def test_a_dry_run_reports_and_stores_nothing_then_the_import_stores(api: httpx.Client) -> None:
    data = archive({"a.md": "# Alpha\n\nwords", "b.bin": "x", ".hidden/c.md": "# c"})
    dry = api.post("/api/v1/toolkits/lore?slug=dry&dry_run=true", content=data)
    assert dry.status_code == 200, dry.text
    report = dry.json()
    assert report["dry_run"] and report["documents"]["added"] == ["a.md"]
    assert [s["where"] for s in report["skipped"]] == ["b.bin"]
    assert any(".hidden/c.md" in n for n in report["notes"])
    assert all(k["slug"] != "dry" for k in api.get("/api/v1/toolkits").json()["toolkits"])
    assert report["documents"]["files"] == [
        {"path": "a.md", "title": "Alpha", "format": "markdown", "chunks": 1}
    ]
    stored = api.post("/api/v1/toolkits/lore?slug=dry&skip_unreadable=1&title=Alpha+notes", content=data)
    assert stored.status_code == 201, stored.text
    assert stored.json()["tool_count"] == 3
    again = api.post("/api/v1/toolkits/lore?slug=dry&skip_unreadable=1", content=data)
    assert again.status_code == 201  # the title stays as it was set
    (kit,) = [k for k in api.get("/api/v1/toolkits").json()["toolkits"] if k["toolkit"] == "dry"]
    assert kit["title"] == "Alpha notes"


def test_a_search_lore_call_on_a_toolkit_with_a_fee_charges_that_fee_and_is_audited(
    api: httpx.Client, app: InProcess
) -> None:
    """A Lore toolkit's fee (2.5, not the default of 1) is charged to a caller who is not its
    owner, once, against the audit row of the call (tests/e2e/test_lore.py runs fee-free)."""
    data = archive({"widgets.md": "# Widgets\n\nThe frobnicator calibrates every widget."})
    assert api.post("/api/v1/toolkits/lore?slug=paid", content=data).status_code == 201
    access = {"visibility": "published", "default": True}
    assert api.patch("/api/v1/toolkits/paid/access", json=access).status_code == 200
    assert api.put("/api/v1/toolkits/paid/quota", json={"fee": 2.5}).status_code == 200
    (key,) = add_user_keys(app.data_dir, "lou", 1)
    assert admin(app, "POST", credits_path(app, "lou"), {"amount": 10}).status_code == 201

    async def search() -> Any:
        async with connect(as_key(app, key)) as client:
            return await client.call_tool(
                "use_tool", {"tool": "paid__search_lore", "input": {"query": "frobnicator"}}
            )

    result = run(search())
    assert result.is_error is False, result.content[0].text
    (hit,) = json.loads(result.content[0].text)["passages"]
    assert "frobnicator" in json.dumps(hit)
    account = admin(app, "GET", credits_path(app, "lou")).json()
    assert account["balance"] == 7.5
    assert [e["amount"] for e in account["entries"] if e["kind"] == "charge"] == [-2.5]
    audited = query(
        app.data_dir,
        "SELECT user_id, tool, runner, outcome, fee_milli, owner_call FROM audit_log WHERE toolkit = 'paid'",
    )
    assert audited == [(user_id(app.data_dir, "lou"), "paid__search_lore", "use_tool", "ok", 2500, 0)]
    assert_charges_match_audit(app.data_dir)
