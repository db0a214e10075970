"""Re-sync, approval and reclassification end to end: a real appliance, a real SDK upstream whose
tool set the test changes, the admin API, and the official SDK client through the bridge.

The upstream (``tests/support/dynamic_upstream.py``) reads its tool set from a file at every
``tools/list``; each test starts its own on a free port and imports it under its own slug.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.support.clients import connect
from tests.support.peers import free_port, peer
from tests.support.servers import Appliance, cli, running_appliance

pytestmark = pytest.mark.e2e
DYNAMIC = Path(__file__).resolve().parents[1] / "support" / "dynamic_upstream.py"
# Until web/app.py installs web/admin_sync itself, serve through a launcher that does.


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    with running_appliance(tmp_path_factory.mktemp("resync") / "data") as running:
        yield running


class Upstream:
    def __init__(self, control: Path, url: str) -> None:
        self.control, self.url = control, url

    def set(self, tools: list[str], *, alpha_v2: bool = False) -> None:
        self.control.write_text(json.dumps({"tools": tools, "alpha_v2": alpha_v2}))


@contextmanager
def dynamic_upstream(tmp_path: Path, tools: list[str]) -> Iterator[Upstream]:
    port = free_port()
    up = Upstream(tmp_path / "toolset.json", f"http://127.0.0.1:{port}/mcp")
    up.set(tools)
    argv = [sys.executable, str(DYNAMIC), "--port", str(port)]
    with peer(argv, port, tmp_path / "upstream.log", env={"TOOLSET_FILE": str(up.control)}):
        yield up


def import_mcp(app: Appliance, url: str, slug: str) -> dict[str, Any]:
    env = {"ALLOWED_TOOL_CIDRS": "127.0.0.1/32"}
    done = cli(app.data_dir, "import", "mcp", "--json", url, "--slug", slug, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def admin(app: Appliance) -> httpx.Client:
    return httpx.Client(
        base_url=app.base_url + "/api/v1", headers={"Authorization": f"Bearer {app.key}"}, timeout=60
    )


def ok(resp: httpx.Response) -> Any:
    assert resp.status_code == 200, resp.text
    return resp.json()


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


async def outcome(client: Client, tool: str, args: dict[str, Any]) -> tuple[bool, str]:
    """(is_error, text) of a call, whether it fails as a result or as a JSON-RPC error."""
    try:
        result = await client.call_tool(tool, args)
    except MCPError as exc:
        return True, str(exc)
    text = result.content[0].text if result.content and hasattr(result.content[0], "text") else ""
    return bool(result.is_error), text


async def visible(client: Client, name: str, query: str, slug: str) -> dict[str, bool]:
    """Where an agent can see ``name``: search, describe, the runner, a direct call."""
    found = (await client.call_tool("search_tools", {"query": query, "toolkit": slug})).structured_content
    described = (await client.call_tool("describe_tools", {"names": [name]})).structured_content
    ran = await outcome(client, "use_tool", {"tool": name, "input": {"text": "abc"}})
    direct = await outcome(client, name, {"text": "abc"})
    return {
        "search": any(r["name"] == name for r in found["results"]),
        "describe": bool(described["tools"]),
        "run": not ran[0],
        "direct": not direct[0],
    }


async def same_as_nonexistent(client: Client, name: str, slug: str) -> None:
    """A hidden tool fails exactly like a name that never existed (nothing reveals it)."""
    # The same shape as ``name`` (another slug, the same action): a did-you-mean depends on the
    # spelling typed, so only a ghost spelled alike must be answered alike.
    ghost = f"{slug}z__{name.split('__', 1)[1]}"
    for runner_args in ({"tool": name, "input": {"text": "abc"}}, {"tool": ghost, "input": {"text": "abc"}}):
        is_error, _ = await outcome(client, "use_tool", runner_args)
        assert is_error
    hidden = await outcome(client, "use_tool", {"tool": name, "input": {"text": "abc"}})
    absent = await outcome(client, "use_tool", {"tool": ghost, "input": {"text": "abc"}})
    assert hidden[1].replace(name, "X") == absent[1].replace(ghost, "X")
    hidden = await outcome(client, name, {"text": "abc"})
    absent = await outcome(client, ghost, {"text": "abc"})
    assert hidden[0] and hidden[1].replace(name, "X") == absent[1].replace(ghost, "X")


NOWHERE = {"search": False, "describe": False, "run": False, "direct": False}
EVERYWHERE = {"search": True, "describe": True, "run": True, "direct": True}


def test_a_new_upstream_tool_is_pending_and_invisible_until_approved_and_a_removed_one_is_disabled(
    app: Appliance, tmp_path: Path
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
    app: Appliance, tmp_path: Path
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


def test_reclassifying_a_tool_changes_the_runner_the_bridge_demands(app: Appliance, tmp_path: Path) -> None:
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
    app: Appliance,
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
        assert httpx.post(app.base_url + "/api/v1/toolkits/demo/sync", timeout=10).status_code == 401


def test_a_tools_list_changed_notification_resyncs_the_toolkit_in_the_background(
    app: Appliance, tmp_path: Path
) -> None:
    port = free_port()
    control = tmp_path / "toolset.json"
    control.write_text(json.dumps({"tools": ["alpha", "mutate"]}))
    argv = [sys.executable, str(DYNAMIC), "--port", str(port), "--sse"]
    with peer(argv, port, tmp_path / "upstream.log", env={"TOOLSET_FILE": str(control)}), admin(app) as api:
        import_mcp(app, f"http://127.0.0.1:{port}/sse", "dyn4")

        async def announce() -> None:
            async with connect(app) as client:
                # The call's answer is not held up by the re-sync its notification triggers.
                called = await outcome(
                    client, "run_tool", {"tool": "dyn4__mutate", "input": {"tools": ["beta", "mutate"]}}
                )
                assert called == (False, "changed")

        run(announce())
        # The scheduler re-syncs about a second (its debounce) after the notice: poll, bounded.
        deadline = time.monotonic() + 20
        while True:
            pending = [p["name"] for p in ok(api.get("/toolkits/dyn4/pending"))["pending"]]
            if pending or time.monotonic() > deadline:
                break
            threading.Event().wait(0.1)
        assert pending == ["dyn4__beta"]
        report = ok(api.post("/toolkits/dyn4/sync"))  # alpha was disabled by the background re-sync
        assert report["removed"] == [] and report["pending"] == ["dyn4__beta"]
        assert ok(api.delete("/toolkits/dyn4"))["deleted"] == "dyn4"  # closes the pooled SSE session
