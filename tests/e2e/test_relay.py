"""Client ↔ upstream relay on the call path: cancellation, logging, ``x-mcp-header``.

A real appliance; ``tests/support/relay_upstream.py`` (the reference test upstream plus tools
that report what reached them) imported three times: over streamable HTTP (the gateway
speaks 2026-07-28 to it), over legacy HTTP+SSE (2025 era) and over stdio. The official SDK
client drives every face: ``/mcp`` in both eras, ``/mcp/<slug>``, legacy ``/sse`` and
``toolspoke stdio``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.types import LoggingMessageNotificationParams

from tests.support.clients import connect
from tests.support.peers import free_port, peer
from tests.support.servers import REPO, Appliance, cli, import_mcp, running_appliance

pytestmark = pytest.mark.e2e
RELAY = REPO / "tests" / "support" / "relay_upstream.py"
STARTED_S = 30  # bound on waiting for the upstream to report that the call runs


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    logs = tmp_path_factory.mktemp("relay-peers")
    http_port, sse_port = free_port(), free_port()
    http = [sys.executable, str(RELAY), "--transport", "streamable-http", "--port", str(http_port)]
    sse = [sys.executable, str(RELAY), "--transport", "sse", "--port", str(sse_port)]
    with (
        peer(http, http_port, logs / "http.log"),
        peer(sse, sse_port, logs / "sse.log"),
        running_appliance(tmp_path_factory.mktemp("relay") / "data") as running,
    ):
        import_mcp(running, f"http://127.0.0.1:{http_port}/mcp", "--slug", "uphttp")
        import_mcp(running, f"http://127.0.0.1:{sse_port}/sse", "--slug", "upsse", "--transport", "sse")
        import_mcp(
            running,
            "--slug",
            "upstdio",
            "--env",
            "UPSTREAM_TRANSPORT=stdio",
            "--",
            sys.executable,
            str(RELAY),
        )
        yield running
    log = "".join(running.output)
    assert "Traceback" not in log and "Task was destroyed" not in log, log


@asynccontextmanager
async def face(app: Appliance, name: str, slug: str, **options: Any) -> AsyncIterator[tuple[Client, str]]:
    """An SDK client on one face, and the prefix its tool names need there."""
    async with AsyncExitStack() as stack:
        if name == "stdio":
            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "appliance", "stdio"],
                cwd=str(REPO),
                env={
                    "TOOLSPOKE_DATA_DIR": str(app.data_dir),
                    "TOOLSPOKE_API_KEY": app.key,
                    "ALLOWED_TOOL_CIDRS": "127.0.0.1/32",
                },
            )
            client = await stack.enter_async_context(Client(params, read_timeout_seconds=60, **options))
        elif name == "sse":
            transport = sse_client(app.base_url + "/sse", headers={"Authorization": f"Bearer {app.key}"})
            client = await stack.enter_async_context(Client(transport, read_timeout_seconds=60, **options))
        else:
            path, _, mode = name.partition(" ")
            path = path.replace("<slug>", slug)
            client = await stack.enter_async_context(connect(app, path, mode=mode or "auto", **options))
        yield client, ("" if "<slug>" in name else f"{slug}__")


async def cancelled_count(client: Client, prefix: str, at_least: int = 0) -> int:
    result = await client.call_tool(f"{prefix}cancellations", {"at_least": at_least, "wait_s": 10})
    assert result.is_error is False, result
    return int(result.structured_content["count"])


async def cancel_a_held_call(client: Client, prefix: str) -> None:
    """Start ``hold``, wait (bounded) until the upstream says it runs, then cancel it."""
    started = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        started.set()

    call = asyncio.create_task(
        client.call_tool(f"{prefix}hold", {"seconds": 60}, progress_callback=on_progress)
    )
    waiter = asyncio.create_task(started.wait())
    done, _ = await asyncio.wait({call, waiter}, timeout=STARTED_S, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    assert waiter in done, f"the upstream never reported that hold runs: {call}"
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


FACES = ["/mcp auto", "/mcp legacy", "/mcp/<slug> auto", "/mcp/<slug> legacy", "sse", "stdio"]
# Every face against the 2026-07-28 HTTP upstream; the 2025-era SSE and the stdio upstreams
# (notifications/cancelled in their own era) through one face.
CANCEL_CASES = [*((f, "uphttp") for f in FACES), ("/mcp auto", "upsse"), ("/mcp auto", "upstdio")]


@pytest.mark.parametrize(("name", "slug"), CANCEL_CASES)
def test_a_call_the_client_cancels_is_cancelled_upstream_and_the_next_call_works(
    app: Appliance, name: str, slug: str
) -> None:
    """UP-03: a cancelled call sends notifications/cancelled upstream; the next call works."""

    async def scenario() -> None:
        async with face(app, name, slug) as (client, prefix):
            before = await cancelled_count(client, prefix)
            await cancel_a_held_call(client, prefix)
            assert await cancelled_count(client, prefix, at_least=before + 1) == before + 1
            added = await client.call_tool(f"{prefix}add", {"a": 2, "b": 3})
            assert added.structured_content == {"result": 5}

    run(scenario())


class HangingApi:
    """An HTTP upstream whose one operation never answers; it notes when the caller hangs up."""

    SPEC = {
        "openapi": "3.0.3",
        "info": {"title": "hanging", "version": "1"},
        "paths": {
            "/wait": {"get": {"operationId": "waitForever", "responses": {"200": {"description": "ok"}}}}
        },
    }

    def __init__(self) -> None:
        self.started = threading.Event()
        self.hung_up = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.started.set()
                self.connection.settimeout(30)
                try:
                    if self.rfile.read(1) == b"":  # EOF: the gateway closed the connection
                        outer.hung_up.set()
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HangingApi:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def test_cancelling_an_openapi_call_aborts_its_http_request(app: Appliance, tmp_path: Path) -> None:
    with HangingApi() as api:
        spec = tmp_path / "hanging.json"
        spec.write_text(json.dumps(HangingApi.SPEC))
        args = ("import", "openapi", str(spec), "--slug", "hanging", "--base-url", api.base_url)
        done = cli(app.data_dir, *args, env={"ALLOWED_TOOL_CIDRS": "127.0.0.1/32"})
        assert done.returncode == 0, done.stderr

        async def scenario() -> None:
            async with face(app, "/mcp auto", "hanging") as (client, prefix):
                call = asyncio.create_task(client.call_tool(f"{prefix}waitForever", {}))
                assert await asyncio.to_thread(api.started.wait, STARTED_S), "the request never arrived"
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
                assert await asyncio.to_thread(api.hung_up.wait, 10), "the upstream request was not aborted"

        run(scenario())


def test_a_cancelled_legacy_request_gets_no_response_on_the_wire(app: Appliance) -> None:
    """2025 era on /mcp: after notifications/cancelled the request's stream ends without an answer."""
    url = app.base_url + "/mcp/uphttp"
    base = {"Authorization": f"Bearer {app.key}", "Accept": "application/json, text/event-stream"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }

    async def scenario() -> None:
        async with httpx.AsyncClient(headers=base, timeout=30) as http:
            opened = await http.post(url, json=init)
            headers = {
                "Mcp-Session-Id": opened.headers["mcp-session-id"],
                "MCP-Protocol-Version": "2025-11-25",
            }
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await http.post(url, json=note, headers=headers)).status_code == 202
            call = {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "hold", "arguments": {"seconds": 60}, "_meta": {"progressToken": "t"}},
            }
            async with http.stream("POST", url, json=call, headers=headers) as answer:
                lines = answer.aiter_lines()
                first = await anext(line async for line in lines if line.startswith("data:"))
                assert json.loads(first[5:])["method"] == "notifications/progress"
                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
                assert (await http.post(url, json=cancel, headers=headers)).status_code == 202
                rest = [line async for line in lines if line.startswith("data:")]
            assert all("id" not in json.loads(line[5:]) for line in rest), rest

    run(scenario())


LEGACY_FACES = {"/mcp legacy", "/mcp/<slug> legacy", "sse"}


@pytest.mark.parametrize("name", FACES)
@pytest.mark.parametrize("slug", ["uphttp", "upsse"])
def test_upstream_log_messages_reach_the_client_at_its_level(app: Appliance, name: str, slug: str) -> None:
    """2025 era: logging/setLevel on the session; 2026-07-28: the level in each request's _meta."""

    async def scenario() -> list[tuple[str, Any, str | None]]:
        seen: list[tuple[str, Any, str | None]] = []

        async def on_log(params: LoggingMessageNotificationParams) -> None:
            seen.append((params.level, params.data, params.logger))

        options: dict[str, Any] = {"logging_callback": on_log}
        if name not in LEGACY_FACES:
            options["log_level"] = "warning"
        async with face(app, name, slug, **options) as (client, prefix):
            if name in LEGACY_FACES:
                with pytest.warns(MCPDeprecationWarning):  # SEP-2577 deprecates logging
                    await client.set_logging_level("warning")
            result = await client.call_tool(f"{prefix}chatty", {})
            assert result.is_error is False, result
        return seen

    assert run(scenario()) == [("warning", "warning message", "chatty"), ("error", "error message", "chatty")]


@pytest.mark.parametrize("name", ["/mcp auto", "stdio"])
def test_a_2026_request_without_a_log_level_gets_no_log_messages(app: Appliance, name: str) -> None:
    async def scenario() -> list[Any]:
        seen: list[Any] = []

        async def on_log(params: LoggingMessageNotificationParams) -> None:
            seen.append(params)

        async with face(app, name, "uphttp", logging_callback=on_log) as (client, prefix):
            assert client.session.protocol_version == "2026-07-28"
            result = await client.call_tool(f"{prefix}chatty", {})
            assert result.is_error is False and result.content[0].text == "logged"
        return seen

    assert run(scenario()) == []


def test_a_legacy_session_without_set_level_gets_every_log_message(app: Appliance) -> None:
    async def scenario() -> list[str]:
        seen: list[str] = []

        async def on_log(params: LoggingMessageNotificationParams) -> None:
            seen.append(params.level)

        async with face(app, "/mcp legacy", "upstdio", logging_callback=on_log) as (client, prefix):
            assert (await client.call_tool(f"{prefix}chatty", {})).is_error is False
        return seen

    assert run(scenario()) == ["debug", "info", "warning", "error"]


@pytest.mark.parametrize("name", ["/mcp/<slug> auto", "/mcp auto", "stdio"])
def test_x_mcp_header_arguments_reach_a_modern_http_upstream_as_mcp_param_headers(
    app: Appliance, name: str
) -> None:
    """The gateway, as a client, mirrors ``region`` into ``Mcp-Param-Region`` whatever the face."""

    async def scenario() -> Any:
        async with face(app, name, "uphttp") as (client, prefix):
            result = await client.call_tool(f"{prefix}regional", {"region": "Zürich west", "query": "q"})
            assert result.is_error is False, result
            return result.structured_content

    assert run(scenario()) == {"header": "=?base64?WsO8cmljaCB3ZXN0?=", "region": "Zürich west"}


def test_a_toolkit_endpoint_refuses_a_call_whose_mcp_param_header_disagrees_with_its_arguments(
    app: Appliance,
) -> None:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "regional", "arguments": {"region": "eu"}, "_meta": meta},
    }
    headers = {
        "Authorization": f"Bearer {app.key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "regional",
    }
    with httpx.Client(headers=headers, timeout=30) as http:
        url = app.base_url + "/mcp/uphttp"
        for extra, why in (({}, "missing"), ({"Mcp-Param-Region": "us"}, "does not match")):
            refused = http.post(url, json=call, headers=extra)
            assert refused.status_code == 400
            error = refused.json()["error"]
            assert (
                error["code"] == -32020 and "Mcp-Param-Region" in error["message"] and why in error["message"]
            )
            assert refused.json()["id"] == 3
        served = http.post(url, json=call, headers={"mcp-param-region": "=?base64?ZXU=?="})
        assert served.status_code == 200 and served.json()["result"]["structuredContent"]["header"] == "eu"


def test_an_upstream_capability_refusal_reaches_a_modern_client_that_did_not_declare_it(
    app: Appliance,
) -> None:
    """-32021 (HTTP 400) when the caller lacks it too; else an isError: the gateway relays no sampling."""

    async def declares_sampling(context: Any, params: Any) -> Any:
        raise AssertionError("the gateway must not relay sampling requests")

    async def scenario() -> Any:
        async with face(app, "/mcp/<slug> auto", "uphttp") as (client, prefix):
            with pytest.raises(MCPError) as refused:
                await client.call_tool(f"{prefix}needs_sampling", {})
            assert refused.value.error.code == -32021
            assert refused.value.error.data["requiredCapabilities"] == {"sampling": {}}
        async with face(app, "/mcp auto", "uphttp", sampling_callback=declares_sampling) as (client, prefix):
            return await client.call_tool(f"{prefix}needs_sampling", {})

    result = run(scenario())
    assert result.is_error is True and result.meta["toolspoke/reason"] == "capability_not_relayed"
    assert "sampling" in result.content[0].text


@pytest.mark.parametrize("slug", ["upsse", "upstdio"])
@pytest.mark.parametrize("tagged", [True, False])
def test_log_messages_of_two_calls_at_once_on_a_shared_channel_reach_only_their_own_caller(
    app: Appliance, slug: str, tagged: bool
) -> None:
    """Legacy SSE and stdio carry every call's messages on one channel, with nothing on the wire
    saying whose they are (2025-11-25 logging.mdx routes by stream only). A message tagged with
    its call's progress token (``_meta``) goes to that caller; an untagged one while two calls
    run is dropped, never guessed: a guess could hand one caller another's messages."""
    group = f"{slug}-{tagged}"

    async def scenario() -> dict[str, list[str]]:
        seen: dict[str, list[str]] = {"A": [], "B": []}

        def collector(who: str) -> Any:
            async def on_log(params: LoggingMessageNotificationParams) -> None:
                seen[who].append(str(params.data))

            return on_log

        async with (
            face(app, "/mcp legacy", slug, logging_callback=collector("A")) as (a, prefix),
            face(app, "/mcp legacy", slug, logging_callback=collector("B")) as (b, _),
        ):
            results = await asyncio.gather(
                *(
                    client.call_tool(f"{prefix}together", {"group": group, "tag": who, "tagged": tagged})
                    for who, client in (("A", a), ("B", b))
                )
            )
        assert [r.content[0].text for r in results] == ["A done", "B done"]
        return seen

    seen = run(scenario())
    assert all(m.startswith("A ") for m in seen["A"]) and all(m.startswith("B ") for m in seen["B"]), seen
    if tagged:
        assert seen == {"A": ["A arrived", "A together"], "B": ["B arrived", "B together"]}
    else:
        # The first "together" is sent while both calls run: it cannot be attributed.
        assert len(seen["A"]) + len(seen["B"]) < 4, seen
