"""A real OpenAI-compatible chat server on loopback, for the tool-naming tests.

``POST /v1/chat/completions`` with ``{"model", "messages", ...}`` answers a chat completion
whose message is what ``answer`` makes of the endpoints the user message lists (by default
``{"tools": [{"id", "name": "fetch_<current name>", "description"}]}``). It keeps every
request: the raw body, the parsed one and the Authorization header. ``mode`` makes it
misbehave the ways real endpoints do: ``malformed`` (a message that is not JSON),
``oversized`` (a 1 MiB answer with a length), ``no_json_mode`` (HTTP 400 to a request that
asks for ``response_format``, as servers without JSON mode answer), ``error`` (HTTP 500).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answerer = Callable[[list[dict[str, Any]]], Any]


def fetch_names(endpoints: list[dict[str, Any]]) -> dict[str, Any]:
    """One well-formed proposal per endpoint, recognisably the model's."""
    return {
        "tools": [
            {
                "id": e["id"],
                "name": f"fetch_{e['current_name']}",
                "description": f"Model sentence for {e['method']} {e['path']}.",
            }
            for e in endpoints
        ]
    }


class ChatServer:
    def __init__(self, answer: Answerer = fetch_names, mode: str = "ok") -> None:
        self.answer = answer
        self.mode = mode
        self.raw: list[bytes] = []  # every request body, as sent
        self.bodies: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                body = json.loads(raw)
                with server._lock:
                    server.raw.append(raw)
                    server.bodies.append(body)
                    server.auth.append(self.headers.get("Authorization"))
                    server.paths.append(self.path)
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"error": "not found"}')
                    return
                mode = server.mode
                if mode == "error":
                    self._send(500, b'{"error": {"message": "model overloaded"}}')
                    return
                if mode == "no_json_mode" and "response_format" in body:
                    self._send(400, b'{"error": {"message": "response_format is not supported"}}')
                    return
                if mode == "oversized":
                    self._send(200, b'{"choices": [{"message": {"content": "' + b"x" * (1 << 20) + b'"}}]}')
                    return
                if mode == "malformed":
                    content = "Sure! Here are the names: list_notes, get_note"
                else:
                    endpoints = json.loads(body["messages"][-1]["content"])["endpoints"]
                    content = json.dumps(server.answer(endpoints))
                completion = {
                    "id": "chatcmpl-test",
                    "object": "chat.completion",
                    "model": body.get("model"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop",
                        }
                    ],
                }
                self._send(200, json.dumps(completion).encode())

            def _send(self, status: int, data: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def sent(self, since: int = 0) -> str:
        """Every request body after the first ``since``, as one text (for leak checks)."""
        with self._lock:
            return "\n".join(r.decode("utf-8", "replace") for r in self.raw[since:])

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
