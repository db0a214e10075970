"""``GET /api/v1/openapi.json``: the admin API described as OpenAPI 3.1.

Written by hand, kept true by tests: ``tests/e2e/test_admin_openapi.py`` checks that every
``/api/v1`` route is documented and every documented operation exists, and runs
Schemathesis against the served document (no server error, every response as documented).
Public: it describes the API, it grants nothing.
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance import __version__
from appliance.web import admin_ledger_openapi
from appliance.web.openapi_ids import with_ids

bp = Blueprint("admin_openapi", url_prefix="/api/v1")

_ERROR = {"$ref": "#/components/schemas/Error"}
_ID = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
_NAMES = {"type": "array", "items": {"type": "string"}, "maxItems": 1000}
_NULLABLE_ID = {"type": ["integer", "null"]}
_TIME = {"type": "string"}
_NULLABLE_TIME = {"type": ["string", "null"]}
_ACTION = {"enum": ["allow", "approve", "deny"]}
_LABELS = {"type": "array", "items": {"enum": ["private", "untrusted", "outward"]}}


def _obj(props: dict[str, Any], required: list[str] | None = None, *, closed: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    if closed:
        out["additionalProperties"] = False
    return out


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _op(
    summary: str,
    ok: dict[str, Any] | None,
    *,
    status: str = "200",
    body: dict[str, Any] | None = None,
    params: list[dict[str, Any]] | None = None,
    public: bool = False,
) -> dict[str, Any]:
    responses: dict[str, Any] = {"default": {"description": "An error", "content": _json(_ERROR)}}
    responses[status] = {"description": summary, "content": _json(ok or {"type": "object"})}
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": True, "content": _json(body)}
    if public:
        op["security"] = []
    return op


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _path(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _query(name: str, schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


_PROJECT_Q = _query("project", {"type": "string"}, "Project slug (default: default).")
_SLUG_P = _path("slug", {"type": "string"})

SCHEMAS: dict[str, Any] = {
    "Error": _obj(
        {
            "error": _obj(
                {
                    "reason": {"type": "string"},
                    "message": {"type": "string"},
                    "field": {"type": "string"},
                    "retry_after_s": {"type": "integer"},
                    "skipped": {"type": "array", "items": {"type": "object"}},
                    "skipped_count": {"type": "integer"},
                    "errors": {"type": "array", "items": {"type": "object"}},
                    "error_count": {"type": "integer"},
                },
                ["reason", "message"],
            )
        },
        ["error"],
    ),
    "User": _obj(
        {"id": _ID, "name": {"type": "string"}, "is_admin": {"type": "boolean"}, "created_at": _TIME},
        ["id", "name", "is_admin", "created_at"],
    ),
    "Agent": _obj(
        {
            "id": _ID,
            "user_id": _ID,
            "name": {"type": "string"},
            "preload": _NAMES,
            "read_only": {"type": "boolean"},
            "created_at": _TIME,
        },
        ["id", "user_id", "name", "preload", "read_only", "created_at"],
    ),
    "Key": _obj(
        {
            "prefix": {"type": "string"},
            "name": {"type": "string"},
            "user_id": _ID,
            "user": {"type": "string"},
            "agent_id": _NULLABLE_ID,
            "agent": {"type": ["string", "null"]},
            "created_at": _TIME,
            "expires_at": _NULLABLE_TIME,
            "revoked_at": _NULLABLE_TIME,
            "preload": {"type": ["array", "null"], "items": {"type": "string"}},
            "read_only": {"type": "boolean"},
            "effective_read_only": {"type": "boolean"},
            "scope": {"type": ["array", "null"], "items": _ref("KeyScope")},
            "budget": {"type": ["number", "null"]},
            "spent": {"type": "number"},
        },
        ["prefix", "name", "user_id", "agent_id", "created_at", "expires_at", "revoked_at", "read_only"],
    ),
    "KeyScope": _obj(
        {"toolkit": {"type": "string"}, "project": {"type": "string"}, "tools": _NAMES},
        ["toolkit"],
    ),
    "ToolkitPolicy": _obj(
        {
            "toolkit": {"type": "string"},
            "project": {"type": "string"},
            "rules": _obj(
                {
                    "toolkit": {"enum": ["allow", "approve", "deny", None]},
                    "kinds": {
                        "type": "object",
                        "additionalProperties": {"enum": ["allow", "approve", "deny"]},
                    },
                    "tools": {
                        "type": "object",
                        "additionalProperties": {"enum": ["allow", "approve", "deny"]},
                    },
                },
                ["toolkit", "kinds", "tools"],
            ),
            "approvers": _obj(
                {
                    "toolkit": {"enum": ["owner", "admin", "user", None]},
                    "kinds": {"type": "object", "additionalProperties": {"enum": ["owner", "admin", "user"]}},
                    "tools": {"type": "object", "additionalProperties": {"enum": ["owner", "admin", "user"]}},
                },
                ["toolkit", "kinds", "tools"],
            ),
            "version": {"type": "integer", "minimum": 0},
            "labels": _obj(
                {
                    "toolkit": _LABELS,
                    "tools": {"type": "object", "additionalProperties": _LABELS},
                },
                ["toolkit", "tools"],
            ),
            "dataflow": _obj(
                {
                    "window_s": {"type": "integer", "minimum": 1},
                    "action": {"enum": ["approve", "deny"]},
                    "approver": {"enum": ["owner", "admin", "user"]},
                    "source": {"enum": ["toolkit", "appliance"]},
                },
                ["window_s", "action", "approver", "source"],
            ),
        },
        ["toolkit", "project", "rules", "approvers", "version", "labels", "dataflow"],
    ),
    "Approval": _obj(
        {
            "id": {"type": "string"},
            "state": {"enum": ["pending", "approved", "denied", "used", "expired"]},
            "tool": {"type": "string"},
            "kind": {"enum": ["read", "write", "destructive"]},
            "toolkit": {"type": "string"},
            "project": {"type": "string"},
            "rule": {"enum": ["toolkit", "kind", "tool", "dataflow"]},
            "why": {
                "type": ["string", "null"],
                "description": "The data-flow guard's reason (labels, the two earlier tools, the window).",
            },
            "approver": {"enum": ["owner", "admin", "user"]},
            "arguments": {"type": "string", "description": "The call's arguments as canonical JSON."},
            "fee": {"type": "number", "description": "What the call costs the caller, in credits."},
            "asked_by": {"type": "object"},
            "created_at": _TIME,
            "expires_at": _TIME,
            "decided_at": _NULLABLE_TIME,
            "decided_by": {"type": ["string", "null"]},
            "used_at": _NULLABLE_TIME,
            "url": {"type": "string"},
            "may_decide": {"type": "boolean"},
        },
        ["id", "state", "tool", "arguments", "expires_at"],
    ),
    "Project": _obj(
        {"slug": {"type": "string"}, "title": {"type": "string"}, "created_at": _TIME}, ["slug", "title"]
    ),
    "ToolkitAccess": _obj(
        {
            "toolkit": {"type": "string"},
            "project": {"type": "string"},
            "owner_id": _NULLABLE_ID,
            "visibility": {"enum": ["private", "published"]},
            "default": {"type": "boolean"},
            "allowed_tools": _NAMES,
        },
        ["toolkit", "project", "owner_id", "visibility", "default", "allowed_tools"],
    ),
    "Grant": _obj(
        {
            "id": _ID,
            "agent_id": _ID,
            "toolkit": {"type": "string"},
            "project": {"type": "string"},
            "enabled": {"type": "boolean"},
            "tools": _NAMES,
            "created_at": _TIME,
        },
        ["id", "agent_id", "toolkit", "project", "enabled", "tools"],
    ),
    "Deleted": _obj({"deleted": {}}, ["deleted"]),
    "Credential": _obj(
        {
            "toolkit": {"type": "string"},
            "project": {"type": "string"},
            "set": {"type": "boolean"},
            "scheme": {"type": "string"},
            "settings": {"type": "object"},
            "key_version": {"type": "integer"},
            "created_at": _TIME,
            "updated_at": _TIME,
        },
        ["toolkit", "project", "set"],
    ),
}


def _list(key: str, item: str) -> dict[str, Any]:
    return _obj({key: {"type": "array", "items": _ref(item)}}, [key])


_AGENT_BODY = _obj({"name": {"type": "string"}, "user_id": _ID, "preload": _NAMES}, closed=True)
_KEY_CHANGE = {
    "read_only": {"type": "boolean"},
    "budget": {"type": ["number", "null"], "minimum": 0},
    "expires_at": {"type": ["string", "null"], "format": "date-time"},
}
_GRANT_CHANGE = _obj({"tools": _NAMES, "enabled": {"type": "boolean"}}, closed=True)
_KIND = _obj(
    {"kind": {"enum": ["read", "write", "destructive", "auto"]}, "project": {"type": "string"}}, ["kind"]
)

PATHS: dict[str, dict[str, Any]] = {
    "/api/v1/openapi.json": {"get": _op("This document", {"type": "object"}, public=True)},
    "/api/v1/me": {"get": _op("The caller's user", None)},
    "/api/v1/users": {
        "get": _op("Every user (admin)", _list("users", "User")),
        "post": _op(
            "Create a user (admin)",
            _ref("User"),
            status="201",
            body=_obj({"name": {"type": "string"}, "is_admin": {"type": "boolean"}}, ["name"], closed=True),
        ),
    },
    "/api/v1/users/{user_id}": {
        "parameters": [_path("user_id", {"type": "integer"})],
        "get": _op("A user (admin, or the caller)", _ref("User")),
        "patch": _op(
            "Change a user's admin role (admin)",
            _ref("User"),
            body=_obj({"is_admin": {"type": "boolean"}}, closed=True),
        ),
        "delete": _op("Delete a user, their agents, keys and grants (admin)", _ref("Deleted")),
    },
    "/api/v1/agents": {
        "get": _op("The caller's agents (an admin: all)", _list("agents", "Agent")),
        "post": _op("Create an agent", _ref("Agent"), status="201", body=_AGENT_BODY),
    },
    "/api/v1/agents/{agent_id}": {
        "parameters": [_path("agent_id", {"type": "integer"})],
        "get": _op("An agent", _ref("Agent")),
        "patch": _op(
            "Rename an agent, change its preloaded tools, or make its keys read-only",
            _ref("Agent"),
            body=_obj(
                {"name": {"type": "string"}, "preload": _NAMES, "read_only": {"type": "boolean"}}, closed=True
            ),
        ),
        "delete": _op("Delete an agent, its keys and grants", _ref("Deleted")),
    },
    "/api/v1/keys": {
        "get": _op(
            "Keys by prefix (never secrets)",
            _list("keys", "Key"),
            params=[_query("user_id", {"type": "integer"}), _query("agent_id", {"type": "integer"})],
        ),
        "post": _op(
            "Create a key for the caller, a user (admin) or an agent; the secret is shown once",
            {"allOf": [_ref("Key"), _obj({"key": {"type": "string"}}, ["key"])]},
            status="201",
            body=_obj(
                {
                    "name": {"type": "string"},
                    "user_id": _ID,
                    "agent_id": _ID,
                    "expires_at": {"type": "string", "format": "date-time"},
                    "preload": _NAMES,
                    "read_only": {"type": "boolean"},
                    "scope": {"type": "array", "items": _ref("KeyScope"), "minItems": 1, "maxItems": 100},
                    "budget": {"type": "number", "minimum": 0},
                },
                closed=True,
            ),
        ),
    },
    "/api/v1/keys/{prefix}": {
        "parameters": [_path("prefix", {"type": "string"})],
        "patch": _op(
            "Change a key: read-only or not, its budget (null: none), its expiry (null: never)",
            _ref("Key"),
            body={"minProperties": 1, **_obj(_KEY_CHANGE, closed=True)},
        ),
        "delete": _op("Revoke a key (effective on its next request)", _ref("Key")),
    },
    "/api/v1/projects": {
        "get": _op("Projects", _list("projects", "Project")),
        "post": _op(
            "Create a project (admin)",
            _ref("Project"),
            status="201",
            body=_obj({"slug": {"type": "string"}, "title": {"type": "string"}}, ["slug"], closed=True),
        ),
    },
    "/api/v1/projects/{slug}": {
        "parameters": [_SLUG_P],
        "delete": _op("Delete an empty project (admin)", _ref("Deleted")),
    },
    "/api/v1/toolkits": {
        "get": _op("Toolkits the caller sees (an admin: all)", {"type": "object"}, params=[_PROJECT_Q]),
    },
    "/api/v1/toolkits/openapi": {
        "post": _op(
            "Import an OpenAPI spec by URL or inline; the caller owns the toolkit (limited per hour)",
            {"type": "object"},
            status="201",
            body=_obj(
                {
                    "slug": {"type": "string"},
                    "source": {"type": "string"},
                    "spec": {"type": "object"},
                    "project": {"type": "string"},
                    "base_url": {"type": "string"},
                    "dry_run": {"type": "boolean"},
                    "replace": {"type": "boolean"},
                },
                ["slug"],
            ),
        ),
    },
    "/api/v1/toolkits/lore": {
        "post": {
            **_op(
                "Import or update a Lore toolkit (a knowledge base) from an archive sent as the body;"
                " the caller owns a new toolkit (limited per hour)",
                {"type": "object"},
                status="201",
                params=[
                    {**_query("slug", {"type": "string"}, "Toolkit slug."), "required": True},
                    _PROJECT_Q,
                    _query("title", {"type": "string", "maxLength": 200}, "Its title (absent: kept)."),
                    _query("dry_run", {"type": "boolean"}, "Read and report; store nothing."),
                    _query("skip_unreadable", {"type": "boolean"}, "Store the readable documents."),
                ],
            ),
            "requestBody": {
                "required": True,
                # Any Content-Type but JSON is taken (the first bytes tell zip from tar); one
                # generic binary type is documented, which clients and fuzzers can all send.
                "description": "A .zip or .tar(.gz) of Markdown, text, HTML and PDF files"
                " (sent as application/zip, application/gzip or application/octet-stream).",
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            },
        },
    },
    "/api/v1/toolkits/infer": {
        "post": _op(
            "Infer HTTP tools from endpoint examples (curl lines, raw HTTP pairs, a HAR); admins;"
            " every tool is stored pending until approved",
            {"type": "object"},
            status="201",
            body=_obj(
                {
                    "slug": {"type": "string"},
                    "examples": {"oneOf": [{"type": "string"}, {"type": "object"}]},
                    "format": {"enum": ["auto", "curl", "http", "har"]},
                    "project": {"type": "string"},
                    "base_url": {"type": "string"},
                    "dry_run": {"type": "boolean"},
                    "replace": {"type": "boolean"},
                },
                ["slug", "examples"],
            ),
        ),
    },
    "/api/v1/toolkits/{slug}": {
        "parameters": [_SLUG_P],
        "delete": _op(
            "Remove a toolkit the caller owns (an admin: any)", {"type": "object"}, params=[_PROJECT_Q]
        ),
    },
    "/api/v1/toolkits/{slug}/access": {
        "parameters": [_SLUG_P],
        "get": _op(
            "A toolkit's owner, visibility, default and allow-list",
            _ref("ToolkitAccess"),
            params=[_PROJECT_Q],
        ),
        "patch": _op(
            "Change them (default and owner: admin)",
            _ref("ToolkitAccess"),
            body=_obj(
                {
                    "project": {"type": "string"},
                    "visibility": {"enum": ["private", "published"]},
                    "default": {"type": "boolean"},
                    "allowed_tools": _NAMES,
                    "owner_id": _ID,
                },
                closed=True,
            ),
        ),
    },
    "/api/v1/toolkits/{slug}/policy": {
        "parameters": [_SLUG_P],
        "get": _op(
            "A toolkit's call policy: its rules, data-flow labels and guard, and the policy version",
            _ref("ToolkitPolicy"),
            params=[_PROJECT_Q],
        ),
        "put": _op(
            "One change: a rule (action: the toolkit's, a kind's or a tool's; null removes it), data-flow"
            " labels (labels: the toolkit's or a tool's; null removes them) or the toolkit's data-flow guard"
            " (dataflow: window_s, action, approver; null: the appliance's setting)",
            _ref("ToolkitPolicy"),
            body=_obj(
                {
                    "project": {"type": "string"},
                    "tool": {"type": "string"},
                    "kind": {"enum": ["read", "write", "destructive"]},
                    "action": {"enum": ["allow", "approve", "deny", None]},
                    "approver": {"enum": ["owner", "admin", "user"]},
                    "labels": {"oneOf": [_LABELS, {"type": "null"}]},
                    "dataflow": {
                        "oneOf": [
                            _obj(
                                {
                                    "window_s": {"type": "integer", "minimum": 1, "maximum": 604800},
                                    "action": {"enum": ["approve", "deny"]},
                                    "approver": {"enum": ["owner", "admin", "user"]},
                                },
                                ["window_s", "action"],
                                closed=True,
                            ),
                            {"type": "null"},
                        ]
                    },
                },
                closed=True,
            ),
        ),
    },
    # the approval queue (web/admin_access.py; gateway/admin/approvals.py)
    "/api/v1/approvals": {
        "get": _op(
            "Calls waiting for a person's yes that the caller may decide (or asked for), newest first",
            _obj({"approvals": {"type": "array", "items": _ref("Approval")}, "state": {"type": "string"}}),
            params=[
                _query("state", {"type": "string"}, "open (default: pending and approved), or one state.")
            ],
        ),
    },
    "/api/v1/approvals/{approval_id}/approve": {
        "parameters": [_path("approval_id", {"type": "string"})],
        "post": _op("Approve a pending call: the agent's retry runs it once", _ref("Approval")),
    },
    "/api/v1/approvals/{approval_id}/deny": {
        "parameters": [_path("approval_id", {"type": "string"})],
        "post": _op("Deny a pending call: it never runs", _ref("Approval")),
    },
    # each person's own connections, a toolkit's mode (web/admin_connections.py; issue 19)
    "/api/v1/connections": {
        "get": _op(
            "The per_user toolkits the caller sees, with the caller's status (never a token)",
            {"type": "object"},
            params=[_query("user", {"type": "string"}, "Another user (admins).")],
        ),
    },
    "/api/v1/connections/{slug}": {
        "parameters": [_SLUG_P],
        "post": _op(
            "Start an OAuth connection: the authorization URL to open (the headless path)",
            {"type": "object"},
            body=_obj({"project": {"type": "string"}, "user": {"type": "string"}}, []),
        ),
        "put": _op(
            "Seal the caller's own token, key or Basic pair for the toolkit (write-only)",
            {"type": "object"},
            body=_obj(
                {
                    "scheme": {"enum": ["bearer", "header", "basic", "query", "cookie"]},
                    "project": {"type": "string"},
                    "user": {"type": "string"},
                    "token": {"type": "string"},
                    "name": {"type": "string"},
                    "value": {"type": "string"},
                    "username": {"type": "string"},
                    "password": {"type": "string"},
                },
                ["scheme"],
            ),
        ),
        "delete": _op(
            "Revoke (where offered) and delete the caller's connection",
            {"type": "object"},
            params=[_PROJECT_Q, _query("user", {"type": "string"}, "Another user (admins).")],
        ),
    },
    "/api/v1/toolkits/{slug}/connections": {
        "parameters": [_SLUG_P],
        "get": _op(
            "The toolkit's mode and who is connected (owner or admin)",
            {"type": "object"},
            params=[_PROJECT_Q],
        ),
    },
    "/api/v1/toolkits/{slug}/connection-mode": {
        "parameters": [_SLUG_P],
        "put": _op(
            "Set the toolkit's connection mode (owner or admin)",
            {"type": "object"},
            body=_obj({"mode": {"enum": ["shared", "per_user"]}, "project": {"type": "string"}}, ["mode"]),
        ),
    },
    "/api/v1/toolkits/{slug}/oauth-client": {
        "parameters": [_SLUG_P],
        "get": _op(
            "The OAuth client for an OpenAPI toolkit's declared code flow (never its secret)",
            {"type": "object"},
            params=[_PROJECT_Q],
        ),
        "put": _op(
            "Set that client (owner or admin): its id, and its secret sealed in the vault",
            {"type": "object"},
            body=_obj(
                {
                    "client_id": {"type": "string"},
                    "client_secret": {"type": "string"},
                    "auth_method": {"enum": ["none", "client_secret_basic", "client_secret_post"]},
                    "project": {"type": "string"},
                },
                ["client_id"],
            ),
        ),
        "delete": _op("Clear that client (owner or admin)", {"type": "object"}, params=[_PROJECT_Q]),
    },
    # credentials, remote MCP import and caps (web/admin_credentials.py)
    "/api/v1/toolkits/{slug}/credentials": {
        "parameters": [_SLUG_P],
        "get": _op(
            "Whether the toolkit has a credential: metadata only (owner or admin)",
            _ref("Credential"),
            params=[_PROJECT_Q],
        ),
        "put": _op(
            "Seal the toolkit's upstream credential; answers its metadata, never the value (owner or admin)",
            _ref("Credential"),
            body=_obj(
                {
                    "scheme": {"enum": ["bearer", "header", "query", "cookie", "basic", "oauth2", "env"]},
                    "project": {"type": "string"},
                    "token": {"type": "string"},
                    "name": {"type": "string"},
                    "value": {"type": "string"},
                    "username": {"type": "string"},
                    "password": {"type": "string"},
                    "token_url": {"type": "string"},
                    "client_id": {"type": "string"},
                    "client_secret": {"type": "string"},
                    "refresh_token": {"type": "string"},
                    "scope": {"type": "string"},
                    "client_auth": {"enum": ["basic", "post"]},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                },
                ["scheme"],
            ),
        ),
        "delete": _op(
            "Remove the toolkit's credential (owner or admin)", {"type": "object"}, params=[_PROJECT_Q]
        ),
    },
    "/api/v1/toolkits/{slug}/limits": {
        "parameters": [_SLUG_P],
        "put": _op(
            "Set the toolkit's response byte cap; null: the setting (owner or admin)",
            {"type": "object"},
            body=_obj(
                {"max_response_bytes": {"type": ["integer", "null"]}, "project": {"type": "string"}},
                ["max_response_bytes"],
            ),
        ),
    },
    "/api/v1/toolkits/mcp": {
        "post": _op(
            "Import a remote MCP server; the caller owns the toolkit (limited per hour)",
            {"type": "object"},
            status="201",
            body=_obj(
                {
                    "slug": {"type": "string"},
                    "url": {"type": "string"},
                    "transport": {"enum": ["auto", "http", "sse"]},
                    "project": {"type": "string"},
                    "dry_run": {"type": "boolean"},
                    "replace": {"type": "boolean"},
                    "require_approval": {"type": "boolean"},
                    "auth": {"type": "object"},
                },
                ["slug", "url"],
            ),
        ),
    },
    "/api/v1/toolkits/{slug}/sync": {
        "parameters": [_SLUG_P],
        "post": _op(
            "Re-sync an MCP toolkit's tools now (owner or admin)", {"type": "object"}, params=[_PROJECT_Q]
        ),
    },
    "/api/v1/toolkits/{slug}/pending": {
        "parameters": [_SLUG_P],
        "get": _op(
            "Tools awaiting approval, the screening's reasons, the diffs of changed ones (owner or admin)",
            {"type": "object"},
            params=[_PROJECT_Q],
        ),
    },
    "/api/v1/toolkits/{slug}/approve": {
        "parameters": [_SLUG_P],
        "post": _op(
            "Approve pending tools (owner or admin)",
            {"type": "object"},
            body=_obj(
                {
                    "tools": _NAMES,
                    "all": {"type": "boolean"},
                    "flagged": {"type": "boolean"},
                    "project": {"type": "string"},
                }
            ),
        ),
    },
    "/api/v1/toolkits/{slug}/probe": {
        "parameters": [_SLUG_P],
        "post": _op("Probe a toolkit's upstream now (admin)", {"type": "object"}, params=[_PROJECT_Q]),
    },
    "/api/v1/backup": {
        "get": {
            "summary": "A consistent copy of the live database, as a file (admin); it holds the sealed "
            "vault, never the master key",
            "responses": {
                "200": {
                    "description": "The SQLite database file",
                    "content": {
                        "application/vnd.sqlite3": {"schema": {"type": "string", "format": "binary"}}
                    },
                },
                "default": {"description": "An error", "content": _json(_ERROR)},
            },
        },
    },
    "/api/v1/health/toolkits": {
        "get": _op("Every toolkit's health (admin)", {"type": "object"}, params=[_PROJECT_Q]),
    },
    "/api/v1/tools/{name}/kind": {
        "parameters": [_path("name", {"type": "string"})],
        "post": _op("Reclassify a tool (admin)", {"type": "object"}, body=_KIND),
    },
    "/api/v1/search": {
        "get": _op(
            "Search tools the caller sees (an admin: all)",
            {"type": "object"},
            params=[
                {"name": "q", "in": "query", "required": True, "schema": {"type": "string"}},
                _query("toolkit", {"type": "string"}),
                _PROJECT_Q,
                _query("limit", {"type": "integer"}),
            ],
        ),
    },
    "/api/v1/search/semantic": {
        "get": _op(
            "Semantic search: switch, provider, model, embedded tools, breaker and counters (admin)",
            {"type": "object"},
        ),
        "put": _op(
            "Switch the semantic pass on or off for every process, without restart (admin)",
            {"type": "object"},
            body=_obj({"enabled": {"type": "boolean"}}, ["enabled"]),
        ),
    },
    "/api/v1/grants": {
        "get": _op(
            "Grants of the caller's agents (an admin: all)",
            _list("grants", "Grant"),
            params=[_query("agent_id", {"type": "integer"})],
        ),
        "post": _op(
            "Grant an agent a toolkit, or some of its tools; enabled=false opts out of a default",
            _ref("Grant"),
            status="201",
            body=_obj(
                {
                    "agent_id": _ID,
                    "toolkit": {"type": "string"},
                    "project": {"type": "string"},
                    "tools": _NAMES,
                    "enabled": {"type": "boolean"},
                },
                ["agent_id", "toolkit"],
                closed=True,
            ),
        ),
    },
    "/api/v1/grants/{grant_id}": {
        "parameters": [_path("grant_id", {"type": "integer"})],
        "get": _op("A grant", _ref("Grant")),
        "patch": _op("Change a grant's tools or switch it off", _ref("Grant"), body=_GRANT_CHANGE),
        "delete": _op("Delete a grant (effective on the agent's next request)", _ref("Deleted")),
    },
}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "toolspoke admin API",
            "version": __version__,
            "description": "Users, agents, keys, projects, toolkits and grants. Every operation "
            "needs `Authorization: Bearer <a user's key>` unless marked public; errors share one shape.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": SCHEMAS,
        },
        "paths": with_ids({**PATHS, **admin_ledger_openapi.PATHS}),
    }


@bp.get("/openapi.json")
async def openapi(request: Request) -> HTTPResponse:
    return response.json(document())
