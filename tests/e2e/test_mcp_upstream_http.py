"""The gateway's MCP client against REAL upstream servers over HTTP.

Peers, each started by the tests on a free loopback port and stopped with its whole process
group: ``tests/support/upstream_server.py`` (official Python SDK 2.3: streamable HTTP in
its stateful SSE, JSON, stateless and bearer variants, and legacy HTTP+SSE) and npm
``@modelcontextprotocol/server-everything`` (TypeScript SDK; streamableHttp and sse), which
``make test`` installs into tests/peers/node_modules. Every request goes through an
``Egress`` that opens only 127.0.0.1/32.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from appliance.egress.guard import EgressPolicy
from appliance.egress.transport import Egress, HttpStream
from appliance.errors import UpstreamError
from appliance.mcpclient.http_transport import (
    LegacySseTransport,
    StreamableHttpTransport,
    connect_http,
    connect_sse,
)
from appliance.mcpclient.session import McpSession
from tests.support.peers import EVERYTHING, UPSTREAM, free_port, peer

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = ("127.0.0.1/32",)
CAP = 4 << 20  # above big_result's 1 MiB in one SSE event


def upstream_argv(port: int, *flags: str) -> list[str]:
    return [sys.executable, str(UPSTREAM), "--port", str(port), *flags]


@pytest.fixture(scope="module")
def peers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One port per upstream variant, all running for the module."""
    logs = tmp_path_factory.mktemp("peer-logs")
    variants = {
        "stateful": ["--transport", "streamable-http"],
        "json": ["--transport", "streamable-http", "--json-response"],
        "stateless": ["--transport", "streamable-http", "--stateless", "--json-response"],
        "bearer": ["--transport", "streamable-http", "--bearer", "s3cret"],
        "sse": ["--transport", "sse"],
    }
    urls: dict[str, str] = {}
    with ExitStack() as stack:
        for name, flags in variants.items():
            port = free_port()
            stack.enter_context(peer(upstream_argv(port, *flags), port, logs / f"{name}.log"))
            path = "/sse" if name == "sse" else "/mcp"
            urls[name] = f"http://127.0.0.1:{port}{path}"
        yield urls


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    node = shutil.which("node")
    assert node is not None and EVERYTHING.exists(), "server-everything is missing (make test installs it)"
    logs = tmp_path_factory.mktemp("everything-logs")
    urls: dict[str, str] = {}
    with ExitStack() as stack:
        for mode, path in (("streamableHttp", "/mcp"), ("sse", "/sse")):
            port = free_port()
            argv = [node, str(EVERYTHING), mode]
            stack.enter_context(peer(argv, port, logs / f"{mode}.log", env={"PORT": str(port)}))
            urls[mode] = f"http://127.0.0.1:{port}{path}"
        yield urls


class RecordingEgress(Egress):
    """An Egress that notes the content type of every streamed answer (JSON or SSE?)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.kinds: list[str] = []

    @asynccontextmanager
    async def stream(self, *args: Any, **kw: Any) -> AsyncIterator[HttpStream]:
        async with super().stream(*args, **kw) as answer:
            if answer.status == 200:
                self.kinds.append(answer.content_type.split(";")[0])
            yield answer


def run(coro: Any) -> Any:
    async def main() -> Any:
        async with asyncio.timeout(60):
            return await coro

    return asyncio.run(main())


def egress(**kw: Any) -> RecordingEgress:
    return RecordingEgress(EgressPolicy(LOOPBACK), max_bytes=CAP, **kw)


async def check_reference_tools(session: McpSession, *, streams: bool = True) -> None:
    """What every variant of upstream_server.py must do through our client.

    ``streams=False``: the server answers application/json only (``--json-response``), so
    it has no channel for progress notifications and none can arrive.
    """
    tools = {t["name"]: t for t in await session.list_tools()}
    assert {"read_item", "delete_item", "add", "slow", "big_result", "fail", "protocol_error"} <= set(tools)
    assert tools["read_item"]["annotations"]["readOnlyHint"] is True
    assert tools["delete_item"]["annotations"]["destructiveHint"] is True

    added = await session.call_tool("add", {"a": 1, "b": 2}, timeout_s=10)
    assert added["structuredContent"] == {"result": 3} and added["isError"] is False

    progress: list[dict[str, Any]] = []
    slept = await session.call_tool("slow", {"seconds": 2}, timeout_s=10, on_progress=progress.append)
    assert slept["isError"] is False
    if streams:
        assert [p["progress"] for p in progress] == [1, 2] and progress[0]["total"] == 2
    else:
        assert progress == []

    big = await session.call_tool("big_result", {}, timeout_s=20, on_progress=lambda p: None)
    assert len(big["content"][0]["text"]) == 1 << 20

    failed = await session.call_tool("fail", {"message": "boom"}, timeout_s=10)
    assert failed["isError"] is True and "boom" in failed["content"][0]["text"]

    with pytest.raises(UpstreamError) as info:
        await session.call_tool("protocol_error", {"code": -32042, "message": "nope"}, timeout_s=10)
    assert info.value.reason == "upstream_error" and info.value.data["code"] == -32042
    assert "nope" in info.value.public_message
    await session.ping()


# -- our reference upstream (Python SDK 2.3) ----------------------------------------------


@pytest.mark.parametrize("variant", ["stateful", "json", "stateless"])
def test_the_reference_upstream_negotiates_the_modern_era_and_serves_every_tool_shape(
    peers: dict[str, str], variant: str
) -> None:
    async def main() -> None:
        async with egress() as eg:
            session = await connect_http(eg, peers[variant], timeout_s=10)
            try:
                assert session.protocol_version == "2026-07-28" and session.modern
                assert session.server_info["name"] == "gateway-test-upstream"
                assert "tools" in session.capabilities
                assert isinstance(session.transport, StreamableHttpTransport)
                assert session.transport.session_id is None  # no sessions in this era
                await check_reference_tools(session, streams=variant == "stateful")
            finally:
                await session.aclose()
            if variant == "stateful":
                # With a progress token the answer streams as SSE (1 MiB in one event included).
                assert "text/event-stream" in eg.kinds and "application/json" in eg.kinds
            else:
                assert set(eg.kinds) == {"application/json"}

    run(main())


def test_the_2025_era_keeps_a_session_id_reads_sse_answers_and_deletes_the_session(
    peers: dict[str, str],
) -> None:
    async def main() -> None:
        async with egress() as eg:
            session = await connect_http(eg, peers["stateful"], timeout_s=10, prefer_modern=False)
            transport = session.transport
            assert isinstance(transport, StreamableHttpTransport)
            try:
                assert session.protocol_version == "2025-11-25" and not session.modern
                old_id = transport.session_id
                assert old_id
                await check_reference_tools(session)
                assert set(eg.kinds) == {"text/event-stream"}  # the stateful default: SSE only
            finally:
                await session.aclose()
            assert transport.session_id is None
            # DELETE really ended it: the server no longer knows the id.
            answer = await eg.send(
                "POST",
                peers["stateful"],
                headers={
                    "Mcp-Session-Id": old_id,
                    "Accept": "application/json, text/event-stream",
                    "Content-Type": "application/json",
                },
                content=b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
            )
            assert answer.status == 404

    run(main())


def test_a_restarted_stateful_upstream_answers_404_and_the_session_reinitialises_once(
    tmp_path: Path,
) -> None:
    """UP-06: A real expiry: the server process is replaced between two calls on the same port."""
    port = free_port()
    argv = upstream_argv(port, "--transport", "streamable-http")
    url = f"http://127.0.0.1:{port}/mcp"

    async def main() -> None:
        async with egress() as eg:
            with peer(argv, port, tmp_path / "first.log"):
                session = await connect_http(eg, url, timeout_s=10, prefer_modern=False)
                transport = session.transport
                assert isinstance(transport, StreamableHttpTransport)
                first_id = transport.session_id
                assert (await session.call_tool("add", {"a": 1, "b": 1}, timeout_s=10))["structuredContent"]
            with peer(argv, port, tmp_path / "second.log"):
                try:
                    result = await session.call_tool("add", {"a": 2, "b": 3}, timeout_s=10)
                    assert result["structuredContent"] == {"result": 5}
                    assert transport.session_id not in (None, first_id)  # a fresh session
                finally:
                    await session.aclose()

    run(main())


def test_a_bearer_protected_upstream_refuses_without_the_header_and_works_with_it(
    peers: dict[str, str],
) -> None:
    async def main() -> None:
        async with egress() as eg:
            with pytest.raises(UpstreamError) as info:
                await connect_http(eg, peers["bearer"], timeout_s=10)
            assert info.value.reason == "upstream_unavailable" and info.value.data["status"] == 401
            session = await connect_http(
                eg, peers["bearer"], headers={"Authorization": "Bearer s3cret"}, timeout_s=10
            )
            try:
                assert session.protocol_version == "2026-07-28"
                added = await session.call_tool("add", {"a": 40, "b": 2}, timeout_s=10)
                assert added["structuredContent"] == {"result": 42}
            finally:
                await session.aclose()

    run(main())


def test_a_legacy_sse_upstream_is_reached_by_fallback_and_directly(peers: dict[str, str]) -> None:
    async def main() -> None:
        async with egress() as eg:
            session = await connect_http(eg, peers["sse"], timeout_s=10)  # POST refused → GET
            try:
                assert isinstance(session.transport, LegacySseTransport)
                assert session.protocol_version == "2025-11-25"
                await check_reference_tools(session)
            finally:
                await session.aclose()
            direct = await connect_sse(eg, peers["sse"], timeout_s=10)
            try:
                assert (await direct.call_tool("add", {"a": 2, "b": 2}, timeout_s=10))["structuredContent"]
            finally:
                await direct.aclose()

    run(main())


def test_a_deadline_is_upstream_timeout_and_the_session_stays_usable(peers: dict[str, str]) -> None:
    """UP-01: a short deadline is upstream_timeout in time and other calls are unaffected."""

    async def main() -> None:
        for url, modern in ((peers["stateful"], True), (peers["stateful"], False), (peers["sse"], False)):
            async with egress() as eg:
                session = await connect_http(eg, url, timeout_s=10, prefer_modern=modern)
                try:
                    started = time.monotonic()
                    with pytest.raises(UpstreamError) as info:
                        await session.call_tool("slow", {"seconds": 5}, timeout_s=0.5)
                    assert info.value.reason == "upstream_timeout"
                    assert time.monotonic() - started < 2
                    added = await session.call_tool("add", {"a": 1, "b": 2}, timeout_s=10)
                    assert added["structuredContent"] == {"result": 3}
                finally:
                    await session.aclose()

    run(main())


# -- failures before any MCP ---------------------------------------------------------------


def test_a_dead_upstream_is_upstream_unavailable_quickly() -> None:
    """UP-08: an unreachable remote upstream is upstream_unavailable within seconds."""
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there

    async def main() -> None:
        async with egress() as eg:
            started = time.monotonic()
            with pytest.raises(UpstreamError) as info:
                await connect_http(eg, url, timeout_s=10)
            assert info.value.reason == "upstream_unavailable"
            assert time.monotonic() - started < 2

    run(main())


def test_the_egress_guard_applies_to_mcp_urls(peers: dict[str, str]) -> None:
    """SSRF-01 / SSRF-09: remote MCP URLs go through the same guard."""

    async def main() -> None:
        async with Egress(EgressPolicy()) as closed:  # loopback not opened
            with pytest.raises(UpstreamError) as info:
                await connect_http(closed, peers["stateful"], timeout_s=5)
            assert info.value.reason == "ssrf_blocked"

    run(main())


class _ForeignEndpoint(BaseHTTPRequestHandler):
    """A legacy SSE server whose endpoint event points at another origin."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.send_response(405)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b"event: endpoint\ndata: http://169.254.169.254/messages\n\n")
        self.wfile.flush()


def test_a_legacy_endpoint_on_another_origin_is_ssrf_blocked() -> None:
    """SSRF-09 (b): a legacy SSE endpoint on another origin is ssrf_blocked."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ForeignEndpoint)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/sse"

    async def main() -> None:
        async with egress() as eg:
            with pytest.raises(UpstreamError) as info:
                await connect_http(eg, url, timeout_s=5)
            assert info.value.reason == "ssrf_blocked"

    try:
        run(main())
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# -- npm server-everything (TypeScript SDK) -------------------------------------------------


@pytest.mark.parametrize("mode", ["streamableHttp", "sse"])
def test_server_everything_negotiates_2025_and_serves_tools(everything: dict[str, str], mode: str) -> None:
    async def main() -> None:
        async with egress() as eg:
            session = await connect_http(eg, everything[mode], timeout_s=15)
            try:
                assert session.protocol_version == "2025-11-25" and not session.modern
                expected = StreamableHttpTransport if mode == "streamableHttp" else LegacySseTransport
                assert isinstance(session.transport, expected)
                tools = {t["name"]: t for t in await session.list_tools()}
                assert {"echo", "get-sum", "trigger-long-running-operation"} <= set(tools)
                assert tools["echo"]["annotations"]["readOnlyHint"] is True
                summed = await session.call_tool("get-sum", {"a": 1, "b": 2}, timeout_s=10)
                assert "3" in summed["content"][0]["text"]
                progress: list[dict[str, Any]] = []
                await session.call_tool(
                    "trigger-long-running-operation",
                    {"duration": 1, "steps": 2},
                    timeout_s=10,
                    on_progress=progress.append,
                )
                assert [p["progress"] for p in progress] == [1, 2]
                await session.ping()
            finally:
                await session.aclose()

    run(main())
