"""Tools inferred from a HAR recorded against a real API, through a real ``toolspoke serve``.

The HAR is recorded here by really calling a notes API on loopback (``NotesUpstream``,
bearer token required) with httpx. Imported through the admin API, the inferred tools are
pending: an agent's SDK client neither finds nor calls them. Approved one by one, they
call the API with the recorded shapes, the token coming from the vault: it never became a
tool input, and neither the database files, the API's answers nor the logs hold it.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.support.clients import connect
from tests.support.leaks import assert_no_leak
from tests.support.notes_upstream import NotesUpstream, har_of
from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e
TOKEN = f"notes-token-{secrets.token_hex(16)}"


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=90))


@pytest.fixture(scope="module")
def upstream() -> Iterator[NotesUpstream]:
    with NotesUpstream(TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    env = {"TOOLSPOKE_DEMO": "0"}
    with running_appliance(tmp_path_factory.mktemp("infer") / "data", env=env) as running:
        yield running


def record(upstream: NotesUpstream) -> dict[str, Any]:
    """A session against the real API, as a browser's or a proxy's HAR would hold it."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=upstream.base_url, headers=auth, timeout=10) as c:
        answers = [
            c.post("/v1/notes", json={"title": "milk", "tags": ["shop"]}),
            c.post("/v1/notes", json={"title": "call mum", "tags": []}),
            c.get("/v1/notes", params={"limit": 10}),
            c.get("/v1/notes", params={"limit": 1, "tag": "shop"}),
            c.get("/v1/notes/1"),
            c.get("/v1/notes/2"),
            c.delete("/v1/notes/2"),
        ]
    assert [a.status_code for a in answers] == [201, 201, 200, 200, 200, 200, 200]
    return har_of(answers)


def structured(result: Any) -> Any:
    assert result.is_error is False, result
    return result.structured_content


def test_inferred_tools_wait_for_approval_then_call_the_api_as_recorded(
    app: Appliance, upstream: NotesUpstream
) -> None:
    har = record(upstream)
    answers: list[str] = []
    admin = {"Authorization": f"Bearer {app.key}"}
    with httpx.Client(base_url=app.base_url, headers=admin, timeout=60) as api:
        dry = api.post("/api/v1/toolkits/infer", json={"slug": "notes", "examples": har, "dry_run": True})
        assert dry.status_code == 200, dry.text
        answers.append(dry.text)
        shown = {t["name"]: t for t in dry.json()["tools"]}
        assert sorted(shown) == [
            "notes__create_note",
            "notes__delete_note",
            "notes__get_note",
            "notes__list_notes",
        ]
        assert shown["notes__create_note"]["inferred_from"] == ["entry 1", "entry 2"]
        assert shown["notes__get_note"]["inferred_from"] == ["entry 5", "entry 6"]
        for tool in shown.values():
            assert "Authorization" not in json.dumps(tool["input_schema"])  # never an input
        made = api.post("/api/v1/toolkits/infer", json={"slug": "notes", "examples": har})
        assert made.status_code == 201, made.text
        answers.append(made.text)
        assert made.json()["base_url"] == upstream.base_url

        before = len(upstream.requests)

        async def pending_is_invisible() -> None:
            async with connect(app) as client:
                found = structured(await client.call_tool("search_tools", {"query": "notes note"}))
                assert [r["name"] for r in found["results"] if r["toolkit"] == "notes"] == []
                refused = await client.call_tool(
                    "use_tool", {"tool": "notes__get_note", "input": {"note_id": 1}}
                )
                assert refused.is_error is True
                with pytest.raises(MCPError, match="unknown tool 'notes__list_notes'"):
                    await client.call_tool("notes__list_notes", {"limit": 1})
                answers.append(str(refused.content))

        run(pending_is_invisible())
        assert len(upstream.requests) == before  # nothing pending reached the API

        for name in ("notes__create_note", "notes__list_notes", "notes__get_note", "notes__delete_note"):
            done = api.post("/api/v1/toolkits/notes/approve", json={"tools": [name]})
            assert done.json()["approved"] == [name], done.text
        pending = api.get("/api/v1/toolkits/notes/pending")
        assert pending.json()["pending"] == []
        answers.append(api.get("/api/v1/toolkits/notes/credentials").text)

    async def approved_tools_call_the_api() -> None:
        async with connect(app) as client:
            found = structured(await client.call_tool("search_tools", {"query": "create note"}))
            assert "notes__create_note" in [r["name"] for r in found["results"]]
            described = structured(
                await client.call_tool("describe_tools", {"names": ["notes__create_note"]})
            )
            answers.append(json.dumps(described))
            body = {"title": "bread", "tags": ["shop"]}
            made = await client.call_tool("run_tool", {"tool": "notes__create_note", "input": {"body": body}})
            assert made.is_error is False, made
            note = json.loads(made.content[0].text)
            listed = await client.call_tool(
                "use_tool", {"tool": "notes__list_notes", "input": {"limit": 5, "tag": "shop"}}
            )
            got = await client.call_tool(
                "use_tool", {"tool": "notes__get_note", "input": {"note_id": note["id"]}}
            )
            gone = await client.call_tool(
                "run_destructive_tool", {"tool": "notes__delete_note", "input": {"note_id": note["id"]}}
            )
            for result in (listed, got, gone):
                assert result.is_error is False, result
            assert json.loads(got.content[0].text) == note
            assert [n["title"] for n in json.loads(listed.content[0].text)["notes"]] == ["milk", "bread"]
            answers.extend(str(r.content) for r in (made, listed, got, gone))

    start = len(upstream.requests)
    run(approved_tools_call_the_api())
    sent = upstream.requests[start:]
    assert [(r.method, r.path) for r in sent] == [
        ("POST", "/v1/notes"),
        ("GET", "/v1/notes"),
        ("GET", "/v1/notes/3"),
        ("DELETE", "/v1/notes/3"),
    ]
    assert json.loads(sent[0].body) == {"title": "bread", "tags": ["shop"]}
    assert sent[0].headers["content-type"] == "application/json"
    assert sent[1].query == {"limit": ["5"], "tag": ["shop"]}
    # The token reached the API from the vault on every call...
    assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in sent)
    # ...and is held nowhere in clear: not the database files, the answers, the logs.
    db = b"".join(p.read_bytes() for p in Path(app.data_dir).iterdir() if p.name.startswith("toolspoke.db"))
    assert_no_leak(db.decode("latin-1"), TOKEN, where="in the database files")
    assert_no_leak("\n".join(answers), TOKEN, where="in the API's answers")
    assert_no_leak("".join(app.output), TOKEN, where="in the logs")


def test_a_har_that_is_not_json_is_refused_and_stores_nothing(app: Appliance) -> None:
    admin = {"Authorization": f"Bearer {app.key}"}
    with httpx.Client(base_url=app.base_url, headers=admin, timeout=60) as api:
        r = api.post("/api/v1/toolkits/infer", json={"slug": "broken", "examples": "{nope", "format": "har"})
        assert r.status_code == 422
        assert r.json()["error"]["message"].startswith("the HAR file is not JSON")
        kits = [k["toolkit"] for k in api.get("/api/v1/toolkits").json()["toolkits"]]
        assert "broken" not in kits
