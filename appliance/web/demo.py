"""The built-in demo API: a small notes service the appliance serves itself.

It exists so that a fresh appliance, with no configuration and no internet, has a toolkit
whose calls really travel over HTTP through the egress seam like any other OpenAPI tool.
Notes live in memory and vanish on restart; that is what a demo should do.
"""

from __future__ import annotations

import itertools
from typing import Any

from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

bp = Blueprint("demo", url_prefix="/demo")

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
    def __init__(self) -> None:
        self.notes: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count(1)

    def add(self, title: str, body: str, tags: list[str]) -> dict[str, Any]:
        note_id = next(self._ids)
        note: dict[str, Any] = {"id": note_id, "title": title, "body": body, "tags": tags}
        self.notes[note_id] = note
        return note


def _store(request: Request) -> NoteStore:
    store: NoteStore = request.app.ctx.demo_notes
    return store


@bp.get("/openapi.json")
async def spec(request: Request) -> HTTPResponse:
    return response.json(openapi_spec(request.app.ctx.rt.self_base_url or ""))


@bp.get("/api/notes")
async def list_notes(request: Request) -> HTTPResponse:
    tag = request.args.get("tag")
    try:
        limit = int(request.args.get("limit", "50"))
    except ValueError:
        return response.json({"error": "limit must be an integer"}, status=400)
    notes = [n for n in reversed(_store(request).notes.values()) if tag is None or tag in n["tags"]]
    return response.json(notes[: max(1, min(limit, 100))])


@bp.post("/api/notes")
async def create_note(request: Request) -> HTTPResponse:
    doc = request.json if request.body else None
    if not isinstance(doc, dict) or not isinstance(doc.get("title"), str) or not doc["title"]:
        return response.json({"error": "a note needs a non-empty 'title'"}, status=400)
    tags = doc.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        return response.json({"error": "'tags' must be a list of strings"}, status=400)
    note = _store(request).add(doc["title"], str(doc.get("body") or ""), tags)
    return response.json(note, status=201)


@bp.get("/api/notes/<note_id:int>")
async def get_note(request: Request, note_id: int) -> HTTPResponse:
    note = _store(request).notes.get(note_id)
    if note is None:
        return response.json({"error": f"no note {note_id}"}, status=404)
    return response.json(note)


@bp.delete("/api/notes/<note_id:int>")
async def delete_note(request: Request, note_id: int) -> HTTPResponse:
    if _store(request).notes.pop(note_id, None) is None:
        return response.json({"error": f"no note {note_id}"}, status=404)
    return response.empty(status=204)
