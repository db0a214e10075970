"""The ledger routes described as OpenAPI 3.1 path items, for the admin API's document.

Kept beside the routes so the two change together; ``web/admin_openapi.py`` merges ``PATHS``
into ``/api/v1/openapi.json`` (whose tests run Schemathesis over them), and
``tests/unit/web/test_admin_ledger_openapi.py`` checks that every ledger route is described and every
description is a route.
"""

from __future__ import annotations

from typing import Any

_ERROR = {"$ref": "#/components/schemas/Error"}
_ID = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
_NUMBER = {"type": "number"}
_FEES = {"type": "object", "additionalProperties": _NUMBER}  # a kind's or a tool's fee, in credits
_NULLABLE_NUMBER = {"type": ["number", "null"]}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _op(summary: str, ok: dict[str, Any], *, status: str = "200", body: dict[str, Any] | None = None,
        params: list[dict[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {
            status: {"description": summary, "content": _json(ok)},
            "default": {"description": "An error", "content": _json(_ERROR)},
        },
    }
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": False, "content": _json(body)}
    return op


def _path(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


_SLUG = _path("slug", {"type": "string"})
_PROJECT = _query("project", {"type": "string"}, "Project slug, when the toolkit is in several.")
_USE = {
    "type": "object",
    "properties": {
        "used": _NUMBER,
        "limit": _NUMBER,
        "remaining": _NULLABLE_NUMBER,
        "resets_at": {"type": "string"},
    },
    "required": ["used", "limit", "remaining", "resets_at"],
}
_QUOTA = {
    "type": "object",
    "properties": {
        "toolkit": {"type": "string"},
        "project": {"type": "string"},
        "fee": _NUMBER,
        "kind_fees": _FEES,
        "tool_fees": _FEES,
        "daily_limit": _NUMBER,
        "monthly_limit": _NUMBER,
        "unit": {"enum": ["calls", "credits"]},
        "daily": _USE,
        "monthly": _USE,
    },
    "required": ["toolkit", "project", "fee", "daily_limit", "monthly_limit", "unit", "daily", "monthly"],
}
_QUOTA_CHANGE = {
    "type": "object",
    "properties": {
        "fee": _NUMBER,
        "daily_limit": _NUMBER,
        "monthly_limit": _NUMBER,
        "unit": {"enum": ["calls", "credits"]},
        # the most specific fee wins: a tool's, its kind's, the toolkit's; null removes one
        "kind_fees": {
            "type": "object",
            "properties": {k: {"type": ["number", "null"]} for k in ("read", "write", "destructive")},
            "additionalProperties": False,
        },
        "tool_fees": {"type": "object", "additionalProperties": {"type": ["number", "null"]}},
    },
    "additionalProperties": False,
}
_ENTRY = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "at": {"type": "string"},
        "kind": {"enum": ["grant", "charge", "void"]},
        "amount": _NUMBER,
        "toolkit_id": {"type": ["integer", "null"]},
        "audit_id": {"type": ["integer", "null"]},
        "refers_to": {"type": ["integer", "null"]},
        "actor": {"type": "string"},
        "note": {"type": "string"},
    },
}
_ACCOUNT = {
    "type": "object",
    "properties": {
        "user_id": {"type": "integer"},
        "balance": _NUMBER,
        "entries": {"type": "array", "items": _ENTRY},
    },
    "required": ["user_id", "balance", "entries"],
}
_GRANTED = {
    "type": "object",
    "properties": {
        "user_id": {"type": "integer"},
        "entry": {"type": "integer"},
        "amount": _NUMBER,
        "balance": _NUMBER,
    },
    "required": ["user_id", "entry", "amount", "balance"],
}
_NOTE = {"type": "object", "properties": {"note": {"type": "string", "maxLength": 500}}}
_CALL = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "at": {"type": "string"},
        "user": {"type": "string"},
        "user_id": {"type": ["integer", "null"]},
        "agent_id": {"type": ["integer", "null"]},
        "agent": {"type": ["string", "null"]},
        "key_prefix": {"type": "string"},
        "toolkit": {"type": ["string", "null"]},
        "project": {"type": ["string", "null"]},
        "tool": {"type": "string"},
        "runner": {"type": ["string", "null"]},
        "outcome": {
            "enum": ["ok", "upstream_error", "is_error", "blocked", "rate_limited", "quota", "invalid"]
        },
        "reason": {"type": ["string", "null"]},
        "duration_ms": _NUMBER,
        "bytes": {"type": "integer"},
        "fee": _NUMBER,
        "owner_call": {"type": "boolean"},
        "redacted": {"type": "integer", "minimum": 0, "description": "values replaced by [redacted]"},
    },
}
_PAGE = {
    "type": "object",
    "properties": {"calls": {"type": "array", "items": _CALL}, "next_cursor": {"type": ["string", "null"]}},
    "required": ["calls", "next_cursor"],
}
_HISTORY_QUERY = [
    _query("since", {"type": "string"}, "RFC 3339 time or unix seconds (inclusive)."),
    _query("until", {"type": "string"}, "RFC 3339 time or unix seconds (exclusive)."),
    _query(
        "outcome", {"type": "string"}, "ok, upstream_error, is_error, blocked, rate_limited, quota, invalid."
    ),
    _query("tool", {"type": "string"}, "Exact tool name."),
    _query("limit", {"type": "integer", "minimum": 1, "maximum": 500}, "Rows per page (default 100)."),
    _query("cursor", {"type": "string"}, "The next_cursor of the previous page."),
]
_TOOLKIT_HISTORY = {
    "get": _op("Calls of a toolkit, newest first", _PAGE, params=[_SLUG, _PROJECT, *_HISTORY_QUERY])
}

PATHS: dict[str, Any] = {
    "/api/v1/toolkits/{slug}/quota": {
        "get": _op("A toolkit's fee, ceilings and current use", _QUOTA, params=[_SLUG, _PROJECT]),
        "put": _op(
            "Change a toolkit's fee, ceilings or unit", _QUOTA, params=[_SLUG, _PROJECT], body=_QUOTA_CHANGE
        ),
    },
    "/api/v1/users/{user_id}/credits": {
        "get": _op("A user's balance and latest ledger entries", _ACCOUNT, params=[_path("user_id", _ID)]),
        "post": _op(
            "Grant credit to a user (negative: take back)",
            _GRANTED,
            status="201",
            params=[_path("user_id", _ID)],
            body={
                "type": "object",
                "properties": {"amount": _NUMBER, "note": {"type": "string", "maxLength": 500}},
                "required": ["amount"],
            },
        ),
    },
    "/api/v1/ledger/{entry_id}/void": {
        "post": _op(
            "Reverse one charge with a compensating entry",
            {
                "type": "object",
                "properties": {"void": {"type": "integer"}, "charge": {"type": "integer"}, "amount": _NUMBER},
            },
            status="201",
            params=[_path("entry_id", _ID)],
            body=_NOTE,
        )
    },
    "/api/v1/toolsets/{slug}/calls": _TOOLKIT_HISTORY,
    "/api/v1/toolkits/{slug}/calls": _TOOLKIT_HISTORY,
    "/api/v1/users/{user_id}/calls": {
        "get": _op(
            "Calls made by a user, newest first", _PAGE, params=[_path("user_id", _ID), *_HISTORY_QUERY]
        )
    },
    "/api/v1/agents/{agent_id}/calls": {
        "get": _op(
            "Calls made by an agent, newest first", _PAGE, params=[_path("agent_id", _ID), *_HISTORY_QUERY]
        )
    },
}
