"""A real HTTP upstream whose answers are large: for the results kept aside (issue 22, item 4).

``GET /items?n=N`` answers N items as indented JSON (one property a line, so there are
lines to read and to match), ``{"items": [{"id": 0, "name": "item-00000", "note": …}, …]}``;
the body of N items is ``body(N)``, so a test compares what it reads back byte for byte.
"""

from __future__ import annotations

import json
import threading
from functools import cache
from http.server import ThreadingHTTPServer
from typing import Any

from tests.support.servers import JsonHandler, read_request

NOTE = "a line of padding so that an item weighs about a hundred bytes"


@cache
def body(n: int) -> bytes:
    items = [{"id": i, "name": f"item-{i:05d}", "note": NOTE} for i in range(n)]
    return json.dumps({"items": items}, indent=1).encode()


def spec(base_url: str) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "Bulk", "version": "1"},
        "servers": [{"url": base_url}],
        "paths": {
            "/items": {
                "get": {
                    "operationId": "listItems",
                    "summary": "List items",
                    "parameters": [
                        {"name": "n", "in": "query", "required": True, "schema": {"type": "integer"}}
                    ],
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
    }


class BulkUpstream:
    def __init__(self) -> None:
        class Handler(JsonHandler):
            def do_GET(self) -> None:
                rec = read_request(self)
                data = body(int(rec.query.get("n", ["0"])[0]))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> BulkUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
