"""SSE stream resumption of the streamable-HTTP client (2025-11-25, SEP-1699).

A small real HTTP server on loopback answers ``tools/call`` with an SSE stream that carries
only a priming event (``id`` and ``retry``) and then closes the connection; a ``GET`` with
the right ``Last-Event-ID`` gets the rest of that stream (the answer). The 2025 era must
resume there without resending the POST; the 2026-07-28 era must not resume at all.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from appliance.egress.guard import EgressPolicy
from appliance.egress.transport import Egress
from appliance.errors import UpstreamError
from appliance.mcpclient.http_transport import SseDecoder, connect_http

LOOPBACK_OPEN = ("127.0.0.1/32",)
SESSION_ID = "resume-session-1"
RESULT = {"content": [{"type": "text", "text": "resumed"}]}


@dataclass
class Scenario:
    modern: bool = False
    retry_ms: int | None = 200
    event_id: str = "ev-1"
    get_status: int = 200  # what a GET with the right Last-Event-ID gets
    posts: list[str] = field(default_factory=list)  # JSON-RPC methods, in order
    gets: list[dict[str, str]] = field(default_factory=list)  # headers of each GET
    stream_closed_at: float | None = None
    get_at: float | None = None
    pending_id: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class Handler(BaseHTTPRequestHandler):
    server: ResumeServer
    protocol_version = "HTTP/1.0"  # the body of an event stream ends when the connection does

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, payload: dict[str, Any], status: int = 200) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Mcp-Session-Id", SESSION_ID)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        sc = self.server.scenario
        message = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        method = message.get("method")
        with sc.lock:
            sc.posts.append(method)
        if "id" not in message:
            self.send_response(202)
            self.end_headers()
            return
        result: dict[str, Any]
        if method == "server/discover":
            if not sc.modern:
                self.send_response(400)
                self.end_headers()
                return
            result = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}}
        elif method == "initialize":
            result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {}}
        elif method == "tools/call":
            self._primed_stream_then_close(message["id"])
            return
        else:
            result = {}
        self._json({"jsonrpc": "2.0", "id": message["id"], "result": result})

    def _primed_stream_then_close(self, request_id: Any) -> None:
        sc = self.server.scenario
        sc.pending_id = request_id
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Mcp-Session-Id", SESSION_ID)
        self.end_headers()
        retry = "" if sc.retry_ms is None else f"retry: {sc.retry_ms}\n"
        self.wfile.write(f"id: {sc.event_id}\n{retry}data: \n\n".encode())
        self.wfile.flush()
        sc.stream_closed_at = time.monotonic()
        # HTTP/1.0: returning closes the connection, before the answer was sent

    def do_GET(self) -> None:
        sc = self.server.scenario
        with sc.lock:
            sc.gets.append(dict(self.headers.items()))
            sc.get_at = time.monotonic()
        if sc.get_status != 200 or self.headers.get("Last-Event-ID") != sc.event_id:
            self.send_response(sc.get_status if sc.get_status != 200 else 400)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        answer = {"jsonrpc": "2.0", "id": sc.pending_id, "result": RESULT}
        self.wfile.write(f"id: ev-2\nevent: message\ndata: {json.dumps(answer)}\n\n".encode())
        self.wfile.flush()


class ResumeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.scenario = scenario

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/mcp"


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ResumeServer] = []

    def start(scenario: Scenario) -> ResumeServer:
        server = ResumeServer(scenario)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def call(url: str, *, timeout_s: float = 5) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        async with Egress(EgressPolicy(LOOPBACK_OPEN)) as egress:
            session = await connect_http(egress, url, timeout_s=5)
            try:
                return await session.call_tool("slow", {}, timeout_s=timeout_s)
            finally:
                await session.aclose()

    return asyncio.run(main())


def test_the_decoder_tracks_the_last_event_id_and_the_retry_field() -> None:
    decoder = SseDecoder(1 << 20)
    assert decoder.feed(b"id: a\nretry: 300\ndata: \n\n") == []  # the priming event
    assert (decoder.last_event_id, decoder.retry_ms) == ("a", 300)
    decoder.feed(b"retry: soon\ndata: {}\n\n")  # an invalid retry is ignored; the id stays
    assert (decoder.last_event_id, decoder.retry_ms) == ("a", 300)
    decoder.feed(b"id: b\n")  # not dispatched yet
    assert decoder.last_event_id == "a"
    decoder.feed(b"data: x\n\n")
    assert decoder.last_event_id == "b"
    resumed = SseDecoder(1 << 20, last_event_id="b", retry_ms=300)
    resumed.feed(b"data: y\n\n")
    assert (resumed.last_event_id, resumed.retry_ms) == ("b", 300)


def test_a_closed_stream_is_resumed_with_get_and_last_event_id(serve: Any) -> None:
    scenario = Scenario()
    server = serve(scenario)
    assert call(server.url) == RESULT
    assert scenario.posts.count("tools/call") == 1  # never resent
    assert len(scenario.gets) == 1
    headers = {k.lower(): v for k, v in scenario.gets[0].items()}
    assert headers["last-event-id"] == "ev-1"
    assert headers["mcp-session-id"] == SESSION_ID
    assert headers["mcp-protocol-version"] == "2025-11-25"
    assert "text/event-stream" in headers["accept"]
    assert scenario.get_at is not None and scenario.stream_closed_at is not None
    assert scenario.get_at - scenario.stream_closed_at >= 0.15  # the retry wait (200 ms)


def test_a_server_that_does_not_resume_fails_the_call_as_before(serve: Any) -> None:
    scenario = Scenario(get_status=405, retry_ms=10)
    server = serve(scenario)
    with pytest.raises(UpstreamError) as caught:
        call(server.url)
    assert caught.value.reason == "upstream_invalid"
    assert scenario.posts.count("tools/call") == 1 and len(scenario.gets) == 1


def test_a_retry_wait_past_the_deadline_does_not_reconnect(serve: Any) -> None:
    scenario = Scenario(retry_ms=60_000)
    server = serve(scenario)
    started = time.monotonic()
    with pytest.raises(UpstreamError) as caught:
        call(server.url, timeout_s=2)
    assert caught.value.reason == "upstream_timeout"
    assert time.monotonic() - started < 2  # gave up at once instead of sleeping
    assert scenario.gets == [] and scenario.posts.count("tools/call") == 1


def test_the_modern_era_never_resumes_a_broken_stream(serve: Any) -> None:
    scenario = Scenario(modern=True, retry_ms=10)
    server = serve(scenario)
    with pytest.raises(UpstreamError) as caught:
        call(server.url)
    assert caught.value.reason == "upstream_invalid"
    assert "initialize" not in scenario.posts  # it really was the 2026-07-28 era
    assert scenario.gets == [] and scenario.posts.count("tools/call") == 1
