"""A real OpenAI-compatible embeddings server on loopback, for provider and backfill tests.

``POST /v1/embeddings`` with ``{"model", "input": [texts]}`` answers ``{"data": [{"index",
"embedding"}]}``. The vectors are a hashed bag of words (64 dimensions), so texts sharing
words are close: enough for a search to rank by them. ``mode`` makes it fail the ways real
endpoints do (``flood``: an endless answer without a length, counted in ``flooded``;
``redirect``: a 307 to ``location``); ``hold_after`` makes it answer that many requests and
then hold every later one until ``release()`` (a crash test kills its client meanwhile);
held requests are never answered.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import threading
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

from appliance import config
from appliance.gateway.runtime import Runtime

T = TypeVar("T")

DIM = 64
# The ``flood`` answer stops here if nobody hangs up (a test would then fail, not hang).
FLOOD_LIMIT = 256 * 1024 * 1024
_WORD = re.compile(r"[a-z0-9]+")


def bag_of_words(text: str, dim: int = DIM) -> list[float]:
    vec = [0.0] * dim
    for word in _WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
        vec[int.from_bytes(digest[:3], "big") % dim] += 1.0 if digest[3] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


class EmbeddingsServer:
    def __init__(
        self,
        mode: str = "ok",
        hold_after: int | None = None,
        delay_s: float = 5.0,
        host: str = "127.0.0.1",
        port: int = 0,
        location: str = "",
    ):
        self.mode = mode
        self.location = location
        self.flooded = 0  # bytes of the endless answer written before the client hung up
        self.flood_done = threading.Event()
        self.connections = 0
        self.hold_after = hold_after
        self.delay_s = delay_s
        self.requests: list[list[str]] = []  # every request's texts, in arrival order
        self.answered: list[str] = []  # texts of requests answered 200
        self.auth: list[str | None] = []
        self.held = threading.Event()  # set when a request is being held
        self.expect_answered: int | None = None
        self.reached = threading.Event()  # set once ``expect_answered`` texts were answered
        self._release = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                texts = list(body.get("input") or [])
                with server._lock:
                    server.requests.append(texts)
                    server.auth.append(self.headers.get("Authorization"))
                    number = len(server.requests)
                if self.path != "/v1/embeddings":
                    self._send(404, {"error": "not found"})
                    return
                if server.hold_after is not None and number > server.hold_after:
                    server.held.set()
                    server._release.wait(30)
                    self.close_connection = True
                    return
                mode = server.mode
                if mode == "slow":
                    server._release.wait(server.delay_s)
                if mode == "error":
                    self._send(500, {"error": {"message": "model overloaded"}})
                    return
                if mode == "redirect":
                    self.send_response(307)
                    self.send_header("Location", server.location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if mode == "flood":
                    self._flood()
                    return
                if mode == "malformed":
                    self._send_raw(200, b"{not json")
                    return
                vectors = [bag_of_words(t) for t in texts]
                if mode == "wrong_dim":
                    vectors = [v[:16] for v in vectors]
                if mode == "wrong_count":
                    vectors = vectors[:-1]
                if mode == "nan":
                    vectors = [[1e39] * DIM for _ in texts]  # overflows float32 to inf
                data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
                payload = {"object": "list", "model": body.get("model"), "data": data}
                if self._send(200, payload) and mode != "slow":
                    with server._lock:
                        server.answered.extend(texts)
                        if (
                            server.expect_answered is not None
                            and len(server.answered) >= server.expect_answered
                        ):
                            server.reached.set()

            def _flood(self) -> None:
                # Close-delimited (HTTP/1.0, no Content-Length): only the reader's cap ends it.
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                chunk = b"0.5, " * 16384
                try:
                    self.wfile.write(b'{"data": [{"index": 0, "embedding": [')
                    while server.flooded < FLOOD_LIMIT:
                        self.wfile.write(chunk)
                        server.flooded += len(chunk)
                except OSError:
                    pass
                self.close_connection = True
                server.flood_done.set()

            def _send(self, status: int, payload: Any) -> bool:
                text = json.dumps(payload, allow_nan=True).encode()
                return self._send_raw(status, text)

            def _send_raw(self, status: int, data: bytes) -> bool:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return True
                except OSError:
                    return False

        class Server(ThreadingHTTPServer):
            def get_request(self) -> Any:
                pair = super().get_request()
                with server._lock:
                    server.connections += 1
                return pair

        self._server = Server((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self._server.server_address[0]}:{self.port}/v1"

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def release(self) -> None:
        self._release.set()

    def query_requests(self, since: int = 0) -> int:
        """Requests with a single text (search queries) after the first ``since`` requests."""
        return sum(1 for texts in self.requests[since:] if len(texts) == 1)

    def __enter__(self) -> EmbeddingsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def with_provider_runtime(
    data_dir: Path, url: str, work: Callable[[Runtime], Awaitable[T]], model: str = "bow", **more: Any
) -> T:
    """Run ``work`` on an open Runtime whose provider is the endpoint at ``url`` (bounded)."""
    cli = {"data_dir": str(data_dir), "embeddings": "openai", "embeddings_url": url}
    settings = config.load(cli={**cli, "embeddings_model": model, **more}, env={})

    async def main() -> T:
        rt = Runtime(settings)
        await rt.open()
        try:
            async with asyncio.timeout(60):  # whatever goes wrong, the test ends
                return await work(rt)
        finally:
            await rt.close()

    return asyncio.run(main())
