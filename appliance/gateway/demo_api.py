"""The built-in demo API: a small notes service every toolspoke process serves itself.

It exists so that a fresh appliance, with no configuration and no internet, has a toolkit
whose calls really travel through the egress seam like any other OpenAPI tool (request
built from the operation, sent, answer decoded and capped). Its base URL is a reserved
origin, ``http://demo.toolspoke.invalid`` (``.invalid`` never resolves, RFC 2606), which the
runtime's egress answers in process (``Egress.serve_locally``): the demo works the same on
``/mcp``, over ``toolspoke stdio`` and from ``toolspoke call``, with or without a ``serve``
running, and the SSRF guard opens no address or port for it. ``serve`` also serves the
same handler over HTTP at ``/demo/api`` (web/demo.py), on the same notes. Installing the
toolkit is ``imports.ensure_demo``'s.

Notes live in memory and vanish when the process ends (for ``toolspoke call``, when the
command does); that is what a demo should do.
"""

from __future__ import annotations

import itertools
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

ORIGIN = "http://demo.toolspoke.invalid"
PREFIX = "/demo/api"
BASE_URL = ORIGIN + PREFIX
SOURCE = "builtin:demo"
_MAX_BODY = 64 * 1024  # a note's fields are bounded by the schema; anything larger is not one

Answer = tuple[int, dict[str, str], bytes]

_NOTE = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "title": {"type": "string"},
        "body": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}


def openapi_spec(base_url: str) -> dict[str, Any]:
    """The demo's OpenAPI 3.1 document, served at ``/demo/openapi.json``."""
    note_ref = {"$ref": "#/components/schemas/Note"}
    id_param = {"name": "noteId", "in": "path", "required": True, "schema": {"type": "integer"}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "toolspoke demo notes",
            "version": "1.0.0",
            "description": (
                "A tiny notes service built into toolspoke so that a new appliance has tools that "
                "really work offline.\n\nNotes are kept in memory until the appliance restarts."
            ),
        },
        "servers": [{"url": base_url.rstrip("/") + "/demo/api"}],
        "tags": [{"name": "notes", "description": "Create, find, read and delete short notes."}],
        "paths": {
            "/notes": {
                "get": {
                    "operationId": "listNotes",
                    "tags": ["notes"],
                    "summary": "List notes, newest first, optionally only those with a tag",
                    "parameters": [
                        {"name": "tag", "in": "query", "schema": {"type": "string"}},
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 100},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "notes",
                            "content": {"application/json": {"schema": {"type": "array", "items": note_ref}}},
                        }
                    },
                },
                "post": {
                    "operationId": "createNote",
                    "tags": ["notes"],
                    "summary": "Write a new note with a title, a body and tags",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["title"],
                                    "properties": {
                                        "title": {"type": "string", "minLength": 1, "maxLength": 200},
                                        "body": {"type": "string", "maxLength": 10000},
                                        "tags": {"type": "array", "items": {"type": "string"}},
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "201": {
                            "description": "created",
                            "content": {"application/json": {"schema": note_ref}},
                        }
                    },
                },
            },
            "/notes/{noteId}": {
                "parameters": [id_param],
                "get": {
                    "operationId": "getNote",
                    "tags": ["notes"],
                    "summary": "Read one note by its id",
                    "responses": {"200": {"description": "the note"}, "404": {"description": "none"}},
                },
                "delete": {
                    "operationId": "deleteNote",
                    "tags": ["notes"],
                    "summary": "Delete a note for good",
                    "responses": {"204": {"description": "deleted"}, "404": {"description": "none"}},
                },
            },
        },
        "components": {"schemas": {"Note": _NOTE}},
    }


class NoteStore:
    """The notes of one process; ``answer`` is what its egress calls for the demo origin."""

    def __init__(self) -> None:
        self.notes: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count(1)

    def add(self, title: str, body: str, tags: list[str]) -> dict[str, Any]:
        note_id = next(self._ids)
        note: dict[str, Any] = {"id": note_id, "title": title, "body": body, "tags": tags}
        self.notes[note_id] = note
        return note

    async def answer(self, method: str, target: str, body: bytes) -> Answer:
        return handle(self, method, target, body)


def _json(status: int, value: Any) -> Answer:
    return status, {"content-type": "application/json"}, orjson.dumps(value)


def _error(status: int, message: str) -> Answer:
    return _json(status, {"error": message})


def handle(notes: NoteStore, method: str, target: str, body: bytes) -> Answer:
    """One request to the notes API: ``target`` is the path (from ``/demo/api``) and query.

    Anyone may send anything here (an imported toolkit can point at this origin too), so
    every input is checked and every failure is a 4xx with a message, never an exception.
    """
    parts = urlsplit(target)
    path = parts.path[len(PREFIX) :] if parts.path.startswith(PREFIX + "/") else None
    if path == "/notes":
        if method == "GET":
            return _list(notes, parse_qs(parts.query))
        if method == "POST":
            return _create(notes, body)
        return _error(405, f"{method} is not allowed on /notes")
    if path is not None and path.startswith("/notes/") and path[7:].isdigit() and len(path) <= 27:
        note_id = int(path[7:])
        if method == "GET":
            note = notes.notes.get(note_id)
            return _error(404, f"no note {note_id}") if note is None else _json(200, note)
        if method == "DELETE":
            if notes.notes.pop(note_id, None) is None:
                return _error(404, f"no note {note_id}")
            return 204, {}, b""
        return _error(405, f"{method} is not allowed on /notes/{note_id}")
    return _error(404, "no such resource")


def _list(notes: NoteStore, query: dict[str, list[str]]) -> Answer:
    tag = query.get("tag", [None])[-1]
    try:
        limit = int(query.get("limit", ["50"])[-1])
    except ValueError:
        return _error(400, "limit must be an integer")
    found = [n for n in reversed(notes.notes.values()) if tag is None or tag in n["tags"]]
    return _json(200, found[: max(1, min(limit, 100))])


def _create(notes: NoteStore, body: bytes) -> Answer:
    if len(body) > _MAX_BODY:
        return _error(413, f"a note is at most {_MAX_BODY} bytes")
    try:
        doc = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return _error(400, "the body is not JSON")
    if not isinstance(doc, dict) or not isinstance(doc.get("title"), str) or not doc["title"]:
        return _error(400, "a note needs a non-empty 'title'")
    tags = doc.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        return _error(400, "'tags' must be a list of strings")
    return _json(201, notes.add(doc["title"], str(doc.get("body") or ""), tags))
