"""A tiny real notes API behind a bearer token, and a HAR recorder for httpx answers.

The tool-inference tests record a HAR by really calling this server (``har_of``), import
it through the appliance, and check that the approved tools call the server the way the
recording did: the server keeps every request it received (``requests``).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable
from http.server import ThreadingHTTPServer
from typing import Any

import httpx

from tests.support.servers import JsonHandler, Recorded, read_request

_NOTE = re.compile(r"/v1/notes/(\d+)")


class NotesUpstream:
    """``GET/POST /v1/notes``, ``GET/DELETE /v1/notes/<id>``; 401 without the token."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.requests: list[Recorded] = []
        self.notes: dict[int, dict[str, Any]] = {}
        self.next_id = 1
        outer = self

        class Handler(JsonHandler):
            def _serve(self) -> None:
                seen = read_request(self)
                outer.requests.append(seen)
                if seen.headers.get("authorization") != f"Bearer {outer.token}":
                    self._send(401, {"error": "unauthorised"})
                    return
                status, payload = outer.answer(seen)
                self._send(status, payload)

            do_GET = do_POST = do_DELETE = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, seen: Recorded) -> tuple[int, Any]:
        match = _NOTE.fullmatch(seen.path)
        if seen.path == "/v1/notes" and seen.method == "GET":
            notes = list(self.notes.values())
            tag = seen.query.get("tag", [None])[0]
            if tag is not None:
                notes = [n for n in notes if tag in n["tags"]]
            limit = int(seen.query.get("limit", ["50"])[0])
            return 200, {"notes": notes[:limit], "total": len(notes)}
        if seen.path == "/v1/notes" and seen.method == "POST":
            doc = json.loads(seen.body or b"{}")
            note = {"id": self.next_id, "title": doc["title"], "tags": doc.get("tags", [])}
            self.notes[self.next_id] = note
            self.next_id += 1
            return 201, note
        if match and int(match.group(1)) in self.notes:
            note_id = int(match.group(1))
            if seen.method == "DELETE":
                return 200, {"deleted": self.notes.pop(note_id)["id"]}
            return 200, self.notes[note_id]
        return 404, {"error": "no such note"}

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> NotesUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def har_entry(response: httpx.Response) -> dict[str, Any]:
    """One HAR 1.2 entry from a request httpx really sent and the answer it got."""
    request = response.request
    entry: dict[str, Any] = {
        "request": {
            "method": request.method,
            "url": str(request.url),
            "httpVersion": "HTTP/1.1",
            "headers": [{"name": k, "value": v} for k, v in request.headers.multi_items()],
            "queryString": [{"name": k, "value": v} for k, v in request.url.params.multi_items()],
        },
        "response": {
            "status": response.status_code,
            "headers": [{"name": k, "value": v} for k, v in response.headers.multi_items()],
            "content": {
                "size": len(response.content),
                "mimeType": response.headers.get("content-type", ""),
                "text": response.text,
            },
        },
    }
    if request.content:
        entry["request"]["postData"] = {
            "mimeType": request.headers.get("content-type", ""),
            "text": request.content.decode(),
        }
    return entry


def har_of(responses: Iterable[httpx.Response]) -> dict[str, Any]:
    return {
        "log": {
            "version": "1.2",
            "creator": {"name": "toolspoke tests", "version": "1"},
            "entries": [har_entry(r) for r in responses],
        }
    }
