"""A real HTTP inventory upstream for the code tools' tests (issue 24), counting each request.

``GET /items`` lists ten items (each with a paragraph of description), ``GET /items/{id}`` is
one item in full (a longer record), ``POST /items`` adds one (a write tool) and
``DELETE /items/{id}`` removes one (a destructive tool); ``GET /whoami`` repeats the request's
``Authorization`` header, as an upstream that must not be trusted with a secret does. The
answers are the size real inventory answers are, so that what a script spares an agent's
context shows.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ITEMS = 10
_WORDS = [
    "sturdy",
    "widget",
    "shipped",
    "from",
    "the",
    "north",
    "warehouse",
    "with",
    "spare",
    "parts",
    "and",
    "a",
    "printed",
    "manual",
]


def _text(seed: int, words: int) -> str:
    return " ".join(_WORDS[(seed * 7 + i) % len(_WORDS)] for i in range(words))


def item(n: int) -> dict[str, Any]:
    return {
        "id": n,
        "name": f"item-{n}",
        "price": 10 + n,
        "stock": (n * 37) % 11,
        "notes": _text(n, 220),
        "history": [{"at": f"2026-11-{d:02d}", "event": _text(n + d, 12)} for d in range(1, 9)],
    }


class ItemsUpstream:
    def __init__(self) -> None:
        self.paths: Counter[str] = Counter()
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def answer(self, status: int, value: Any) -> None:
                body = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def seen(self) -> str:
                path = self.path.split("?")[0]
                with outer.lock:
                    outer.paths[f"{self.command} {path}"] += 1
                return path

            def do_GET(self) -> None:
                path = self.seen()
                if path == "/whoami":
                    self.answer(200, {"authorization": self.headers.get("Authorization", "")})
                elif path == "/items":
                    listed = [
                        {"id": n, "name": f"item-{n}", "summary": _text(n, 60)} for n in range(1, ITEMS + 1)
                    ]
                    self.answer(200, {"items": listed})
                elif path.startswith("/items/") and path[7:].isdigit():
                    self.answer(200, item(int(path[7:])))
                else:
                    self.answer(404, {"error": "no such item"})

            def do_POST(self) -> None:
                self.seen()
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                self.answer(201, {"id": ITEMS + 1})

            def do_DELETE(self) -> None:
                self.seen()
                self.answer(200, {"deleted": True})

        class Server(ThreadingHTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def count(self, method: str, prefix: str) -> int:
        with self.lock:
            return sum(n for k, n in self.paths.items() if k.startswith(f"{method} {prefix}"))

    def spec(self) -> dict[str, Any]:
        ident = {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}
        ok = {"200": {"description": "ok"}}
        return {
            "openapi": "3.0.3",
            "info": {"title": "inventory", "version": "1"},
            "servers": [{"url": self.base_url}],
            "paths": {
                "/items": {
                    "get": {"operationId": "listItems", "summary": "List the items.", "responses": ok},
                    "post": {
                        "operationId": "createItem",
                        "summary": "Add an item.",
                        "requestBody": {
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "object",
                                        "properties": {"name": {"type": "string"}},
                                        "required": ["name"],
                                    }
                                }
                            }
                        },
                        "responses": {"201": {"description": "made"}},
                    },
                },
                "/whoami": {"get": {"operationId": "whoAmI", "summary": "Who calls.", "responses": ok}},
                "/items/{id}": {
                    "get": {
                        "operationId": "getItem",
                        "summary": "One item in full.",
                        "parameters": [ident],
                        "responses": ok,
                    },
                    "delete": {
                        "operationId": "deleteItem",
                        "summary": "Remove an item.",
                        "parameters": [ident],
                        "responses": ok,
                    },
                },
            },
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
