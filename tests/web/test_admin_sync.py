"""Re-sync, approval and reclassification (web/admin_sync.py) in process
(tests/support/inprocess.py): a real SDK upstream whose tool set the test changes, the admin
API, and the official SDK client through the bridge.

The upstream (``tests/support/dynamic_upstream.py``) reads its tool set from a file at every
``tools/list``; each test starts its own on a free port and imports it under its own slug
(``toolspoke import mcp`` run in this process).

Moved from tests/e2e/test_mcp_resync.py, which keeps the path on a real ``toolspoke serve``:
an import by the CLI as a process, and a ``tools/list_changed`` notice that re-syncs the
toolkit in the background.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.clients import connect
from tests.support.inprocess import InProcess, served_in_process
from tests.support.resync import EVERYWHERE, NOWHERE, dynamic_upstream, outcome, same_as_nonexistent, visible
from tests.support.servers import import_mcp as cli_import_mcp

pytestmark = pytest.mark.inprocess


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    with served_in_process(tmp_path_factory.mktemp("resync") / "data") as served:
        yield served


def import_mcp(app: InProcess, url: str, slug: str) -> dict[str, Any]:
    return cli_import_mcp(app, url, "--slug", slug)  # type: ignore[arg-type]


def admin(app: InProcess) -> httpx.Client:
    return app.client(prefix="/api/v1", headers={"Authorization": f"Bearer {app.key}"}, timeout=60)


def ok(resp: httpx.Response) -> Any:
    assert resp.status_code == 200, resp.text
    return resp.json()


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def test_a_new_upstream_tool_is_pending_and_invisible_until_approved_and_a_removed_one_is_disabled(
    app: InProcess, tmp_path: Path
) -> None:
    with dynamic_upstream(tmp_path, ["alpha", "beta"]) as up, admin(app) as api:
        assert import_mcp(app, up.url, "dyn1")["tool_count"] == 2
        up.set(["alpha", "gamma"])
        report = ok(api.post("/toolkits/dyn1/sync"))
        assert report["added"] == ["dyn1__gamma"]
        assert report["removed"] == ["dyn1__beta"]
        assert report["unchanged"] == 1 and report["pending"] == ["dyn1__gamma"]
        pending = ok(api.get("/toolkits/dyn1/pending"))["pending"]
        assert [(p["name"], p["runner"]) for p in pending] == [("dyn1__gamma", "use_tool")]

        async def hidden() -> None:
            async with connect(app) as client:
                assert await visible(client, "dyn1__gamma", "count the characters of text", "dyn1") == NOWHERE
                assert await visible(client, "dyn1__beta", "reverse text", "dyn1") == NOWHERE
                await same_as_nonexistent(client, "dyn1__gamma", "dyn1")
                await same_as_nonexistent(client, "dyn1__beta", "dyn1")
                assert await visible(client, "dyn1__alpha", "echo text", "dyn1") == EVERYWHERE

        run(hidden())
        assert ok(api.post("/toolkits/dyn1/approve", json={"tools": ["dyn1__gamma"]}))["approved"] == [
            "dyn1__gamma"
        ]
        assert ok(api.get("/toolkits/dyn1/pending"))["pending"] == []

        async def approved() -> None:
            async with connect(app) as client:
                assert (
                    await visible(client, "dyn1__gamma", "count the characters of text", "dyn1") == EVERYWHERE
                )
                assert (
                    await outcome(client, "use_tool", {"tool": "dyn1__gamma", "input": {"text": "abcd"}})
                ) == (
                    False,
                    "gamma:4",
                )
                assert await visible(client, "dyn1__beta", "reverse text", "dyn1") == NOWHERE

        run(approved())
        # A disabled tool that comes back is pending again, even though it did not change.
        up.set(["alpha", "beta", "gamma"])
        report = ok(api.post("/toolkits/dyn1/sync"))
        assert report["returned"] == ["dyn1__beta"] and report["pending"] == ["dyn1__beta"]
        assert ok(api.post("/toolkits/dyn1/approve", json={"all": True}))["approved"] == ["dyn1__beta"]


def test_an_approved_tool_whose_schema_changed_is_pending_again_until_approved(
    app: InProcess, tmp_path: Path
) -> None:
    with dynamic_upstream(tmp_path, ["alpha"]) as up, admin(app) as api:
        import_mcp(app, up.url, "dyn2")
        up.set(["alpha"], alpha_v2=True)
        report = ok(api.post("/toolkits/dyn2/sync"))
        assert report["changed"] == ["dyn2__alpha"] and report["pending"] == ["dyn2__alpha"]
        (pending,) = ok(api.get("/toolkits/dyn2/pending"))["pending"]
        assert "loud" in pending["input_schema"]["properties"]

        async def hidden() -> None:
            async with connect(app) as client:
                assert await visible(client, "dyn2__alpha", "echo text", "dyn2") == NOWHERE
                await same_as_nonexistent(client, "dyn2__alpha", "dyn2")

        run(hidden())
        # A second re-sync with nothing new changes nothing: still pending, same definition.
        again = ok(api.post("/toolkits/dyn2/sync"))
        assert again["changed"] == [] and again["pending"] == ["dyn2__alpha"]
        assert ok(api.post("/toolkits/dyn2/approve", json={"all": True}))["approved"] == ["dyn2__alpha"]

        async def approved() -> None:
            async with connect(app) as client:
                described = (
                    await client.call_tool("describe_tools", {"names": ["dyn2__alpha"]})
                ).structured_content
                assert "loud" in described["tools"][0]["input_schema"]["properties"]
                result = await outcome(
                    client, "use_tool", {"tool": "dyn2__alpha", "input": {"text": "hi", "loud": True}}
                )
                assert result == (False, "alpha:HI")

        run(approved())


def test_reclassifying_a_tool_changes_the_runner_the_bridge_demands(app: InProcess, tmp_path: Path) -> None:
    with dynamic_upstream(tmp_path, ["alpha"]) as up, admin(app) as api:
        import_mcp(app, up.url, "dyn3")
        changed = ok(api.post("/tools/dyn3__alpha/kind", json={"kind": "write"}))
        assert (changed["kind"], changed["runner"], changed["source_kind"]) == ("write", "run_tool", "read")

        async def as_write() -> None:
            async with connect(app) as client:
                refused = await outcome(client, "use_tool", {"tool": "dyn3__alpha", "input": {"text": "a"}})
                assert refused[0] and "run_tool" in refused[1]
                assert await outcome(client, "run_tool", {"tool": "dyn3__alpha", "input": {"text": "a"}}) == (
                    False,
                    "alpha:a",
                )
                found = (
                    await client.call_tool("search_tools", {"query": "echo", "toolkit": "dyn3"})
                ).structured_content
                assert found["results"][0]["runner"] == "run_tool"

        run(as_write())
        back = ok(api.post("/tools/dyn3__alpha/kind", json={"kind": "auto"}))
        assert (back["kind"], back["runner"], back["kind_override"]) == ("read", "use_tool", None)

        async def as_read() -> None:
            async with connect(app) as client:
                assert await outcome(client, "use_tool", {"tool": "dyn3__alpha", "input": {"text": "b"}}) == (
                    False,
                    "alpha:b",
                )
                wrong = await outcome(client, "run_tool", {"tool": "dyn3__alpha", "input": {"text": "b"}})
                assert wrong[0] and "use_tool" in wrong[1]

        run(as_read())


def test_the_sync_api_names_the_bad_field_and_answers_404_for_unknown_toolkits_and_tools(
    app: InProcess,
) -> None:
    with admin(app) as api:
        bad = api.post("/tools/demo__listNotes/kind", json={"kind": "sometimes"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "kind"
        assert api.post("/tools/demo__listNotes/kind", json={}).json()["error"]["field"] == "kind"
        assert api.post("/tools/nope__nothing/kind", json={"kind": "read"}).status_code == 404
        for path in ("/toolkits/nope/sync", "/toolkits/nope/approve"):
            assert api.post(path, json={"all": True}).status_code == 404
        assert api.get("/toolkits/nope/pending").status_code == 404
        missing = api.post("/toolkits/demo/approve", json={})
        assert missing.status_code == 422 and missing.json()["error"]["field"] == "tools"
        both = api.post("/toolkits/demo/approve", json={"all": True, "tools": ["x"]})
        assert both.status_code == 422 and both.json()["error"]["field"] == "tools"
        assert api.post("/toolkits/demo/approve", json={"tools": ["demo__nothing"]}).status_code == 404
        openapi = api.post("/toolkits/demo/sync")
        assert openapi.status_code == 422 and openapi.json()["error"]["field"] == "toolkit"
        assert app.request("POST", "/api/v1/toolkits/demo/sync", timeout=10).status_code == 401
