"""The legacy HTTP+SSE transport (``GET /sse``, ``POST /messages``) against a real appliance.

Driven by the official SDK's ``sse_client``, the MCP Inspector CLI, and plain httpx for the
rules a client relies on on the wire (framing, status codes, the key binding a stream).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.sse import sse_client

from tests.support.clients import inspector
from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e
BRIDGE = {
    "search_tools",
    "list_toolkits",
    "describe_tools",
    "read_guide",
    "read_result",
    "use_tool",
    "run_tool",
    "run_destructive_tool",
}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ENDPOINT = re.compile(r"^/messages\?session_id=[A-Za-z0-9_-]{43}$")
OTHER_KEY = "tsk_other-user-key-0123456789abcdefghijklmnop"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    with running_appliance(tmp_path_factory.mktemp("sse") / "data") as running:
        # A second, valid key of another user: written straight into the database (WAL lets
        # us beside the server); there is no CLI for non-admin keys yet.
        with sqlite3.connect(running.data_dir / "toolspoke.db", timeout=10) as db:
            user = db.execute("INSERT INTO users (name, is_admin) VALUES ('other', 0)").lastrowid
            db.execute(
                "INSERT INTO api_keys (user_id, name, prefix, secret_hash) VALUES (?, 'other', ?, ?)",
                (user, OTHER_KEY[:12], hashlib.sha256(OTHER_KEY.encode()).hexdigest()),
            )
        db.close()
        yield running
    # Streams cut by clients and by shutdown leave nothing behind: no error, no stray task.
    log = "".join(running.output)
    assert "Traceback" not in log and "ERROR" not in log and "Task was destroyed" not in log, log


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


@asynccontextmanager
async def connect(app: Appliance, path: str = "/sse", **kw: Any) -> AsyncIterator[Client]:
    transport = sse_client(app.base_url + path, headers={"Authorization": f"Bearer {app.key}"}, **kw)
    async with Client(transport, read_timeout_seconds=30) as client:
        yield client


def structured(result: Any) -> Any:
    assert result.is_error is False, result
    return result.structured_content


def test_an_sdk_client_over_sse_lists_the_bridge_searches_and_runs_a_demo_tool(app: Appliance) -> None:
    async def scenario() -> None:
        async with connect(app) as client:
            # SDK 2.x probes server/discover first; the error it gets sends it to initialize.
            assert client.session.protocol_version == "2025-11-25"
            assert {t.name for t in (await client.list_tools()).tools} == BRIDGE
            found = structured(await client.call_tool("search_tools", {"query": "write a new note"}))
            assert found["results"][0]["name"] == "demo__createNote"
            made = structured(
                await client.call_tool(
                    "run_tool", {"tool": "demo__createNote", "input": {"body": {"title": "x"}}}
                )
            )
            assert made["title"] == "x"
            wrong = await client.call_tool("use_tool", {"tool": "demo__createNote", "input": {}})
            assert wrong.is_error is True and wrong.meta["toolspoke/reason"] == "wrong_runner"

    run(scenario())


def test_sse_slug_serves_one_toolkit_under_its_own_names(app: Appliance) -> None:
    async def scenario() -> None:
        async with connect(app, "/sse/demo") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"createNote", "getNote", "listNotes", "deleteNote"} <= names
            assert not names & BRIDGE
            made = structured(await client.call_tool("createNote", {"body": {"title": "direct"}}))
            got = structured(await client.call_tool("getNote", {"noteId": made["id"]}))
            assert got["title"] == "direct"
        async with connect(app, "/sse/default/demo") as client:
            assert "createNote" in {t.name for t in (await client.list_tools()).tools}

    run(scenario())


def test_the_mcp_inspector_cli_lists_the_bridge_tools_over_sse(app: Appliance) -> None:
    result = inspector(app, "/sse", "sse", "--method", "tools/list")
    assert {t["name"] for t in result["tools"]} == BRIDGE


# --- the wire, with plain httpx ------------------------------------------------------------


class Events:
    """SSE events from an open stream, read one at a time (comments skipped)."""

    def __init__(self, resp: httpx.Response) -> None:
        self.resp = resp
        self.lines = resp.iter_lines()

    def next(self) -> tuple[str, str]:
        event, data = "message", []
        for line in self.lines:
            if line == "":
                if data:
                    return event, "\n".join(data)
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
        raise AssertionError("stream ended")

    def message(self) -> dict[str, Any]:
        event, data = self.next()
        assert event == "message"
        return dict(json.loads(data))


@pytest.fixture
def http(app: Appliance) -> Iterator[httpx.Client]:
    # The read timeout bounds every wait for an event.
    headers = {"Authorization": f"Bearer {app.key}"}
    with httpx.Client(base_url=app.base_url, headers=headers, timeout=httpx.Timeout(30, read=20)) as client:
        yield client


@contextmanager
def stream(http: httpx.Client, path: str = "/sse") -> Iterator[tuple[str, Events]]:
    with http.stream("GET", path) as resp:
        assert resp.status_code == 200
        events = Events(resp)
        name, endpoint = events.next()
        assert name == "endpoint"
        yield endpoint, events


def test_a_stream_announces_its_endpoint_and_carries_responses_to_posts(http: httpx.Client) -> None:
    with http.stream("GET", "/sse") as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["x-accel-buffering"] == "no"
        assert resp.headers["cache-control"] == "no-store"
        events = Events(resp)
        name, endpoint = events.next()
        assert name == "endpoint" and ENDPOINT.match(endpoint), endpoint

        early = http.post(endpoint, json={"jsonrpc": "2.0", "id": "a", "method": "tools/list"})
        assert early.status_code == 202
        reply = events.message()
        assert reply["id"] == "a" and reply["error"]["code"] == -32600
        assert "initialize" in reply["error"]["message"]

        assert http.post(endpoint, json=INIT).status_code == 202
        assert events.message()["result"]["protocolVersion"] == "2025-06-18"
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert http.post(endpoint, json=initialized).status_code == 202
        # A response from the client (the gateway never asked anything) is ignored.
        assert http.post(endpoint, json={"jsonrpc": "2.0", "id": 9, "result": {}}).status_code == 202
        assert http.post(endpoint, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}).status_code == 202
        assert events.message() == {"jsonrpc": "2.0", "id": 2, "result": {}}
        # 2025-06-18 was negotiated and is remembered: bad arguments are -32602 with the path.
        call = {"name": "demo__getNote", "arguments": {}}
        http.post(endpoint, json={"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call})
        err = events.message()["error"]
        assert err["code"] == -32602 and err["data"]["path"] == "/noteId"

        bad = http.post(
            endpoint, content=b'{"jsonrpc": "2.0", ', headers={"Content-Type": "application/json"}
        )
        assert bad.status_code == 400 and bad.json()["error"]["code"] == -32700
        batch = http.post(endpoint, json=[{"jsonrpc": "2.0", "id": 4, "method": "ping"}])
        assert batch.status_code == 400 and batch.json()["error"]["code"] == -32600
        plain = http.post(endpoint, content=b"{}", headers={"Content-Type": "text/plain"})
        assert plain.status_code == 415
        # None of the refused posts produced an event: the next one is the next answer.
        http.post(endpoint, json={"jsonrpc": "2.0", "id": 5, "method": "ping"})
        assert events.message()["id"] == 5


def test_no_key_is_401_and_a_foreign_origin_403_on_both_routes(app: Appliance, http: httpx.Client) -> None:
    with httpx.Client(base_url=app.base_url, timeout=30) as anonymous:
        for resp in (anonymous.get("/sse"), anonymous.post("/messages?session_id=x", json=INIT)):
            assert resp.status_code == 401
            assert resp.headers["www-authenticate"].startswith("Bearer")
        wrong = anonymous.get("/sse", headers={"Authorization": "Bearer tsk_not-a-real-key-000000000000000"})
        assert wrong.status_code == 401
    evil = {"Origin": "https://evil.example"}
    assert http.get("/sse", headers=evil).status_code == 403
    with stream(http) as (endpoint, _):
        assert http.post(endpoint, json=INIT, headers=evil).status_code == 403
    assert http.get("/sse", headers={"Host": "evil.example"}).status_code == 421
    assert http.get("/sse/no-such-kit").status_code == 404


def test_an_unknown_session_or_another_keys_session_is_404_alike(app: Appliance, http: httpx.Client) -> None:
    unknown = http.post("/messages?session_id=" + "A" * 43, json=INIT)
    assert unknown.status_code == 404
    assert http.post("/messages", json=INIT).status_code == 400
    with stream(http) as (endpoint, events):
        other = http.post(endpoint, json=INIT, headers={"Authorization": f"Bearer {OTHER_KEY}"})
        assert other.status_code == 404
        assert other.json() == unknown.json()  # no oracle: exactly the unknown-session answer
        # The owner's stream is unaffected and got nothing from the intruder.
        http.post(endpoint, json={"jsonrpc": "2.0", "id": 7, "method": "ping"})
        assert events.message()["id"] == 7
    # The other key is valid: it may open a stream of its own.
    other_headers = {"Authorization": f"Bearer {OTHER_KEY}"}
    with (
        httpx.Client(base_url=app.base_url, headers=other_headers, timeout=30) as h,
        stream(h) as (endpoint, events),
    ):
        h.post(endpoint, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert events.message()["id"] == 1


def test_a_client_that_disconnects_leaves_no_session_behind(app: Appliance, http: httpx.Client) -> None:
    ids: list[str] = []

    async def scenario() -> None:
        async with connect(app, on_session_created=ids.append) as client:
            await client.list_tools()

    run(scenario())
    assert len(ids) == 1
    # The server notices the closed connection asynchronously: poll, bounded.
    deadline = time.monotonic() + 10
    while True:
        status = http.post(f"/messages?session_id={ids[0]}", json=INIT).status_code
        if status == 404 or time.monotonic() > deadline:
            break
        time.sleep(0.02)  # pacing of a bounded poll, not a synchronisation
    assert status == 404


def test_server_shutdown_ends_an_open_stream_cleanly(tmp_path_factory: pytest.TempPathFactory) -> None:
    with running_appliance(tmp_path_factory.mktemp("sse-stop") / "data") as own:
        headers = {"Authorization": f"Bearer {own.key}"}
        with (
            httpx.Client(base_url=own.base_url, headers=headers, timeout=httpx.Timeout(30, read=20)) as h,
            stream(h) as (endpoint, events),
        ):
            h.post(endpoint, json=INIT)
            assert events.message()["id"] == 1
            own.proc.terminate()
            # The chunked body ends properly (httpx would raise on a torn one) with no event.
            with pytest.raises(AssertionError, match="stream ended"):
                events.next()
        assert own.proc.wait(timeout=20) == 0
    log = "".join(own.output)
    assert "Traceback" not in log and "ERROR" not in log and "Task was destroyed" not in log, log
