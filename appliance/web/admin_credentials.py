"""Admin API for credentials, remote MCP imports and per-toolkit caps.

A user's key (never an agent's): a toolkit's credential and cap are managed by its owner or
an admin (anyone else gets the 404 of a toolkit that does not exist); a remote MCP import is
owned by whoever makes it and counts against the hourly import limit, as OpenAPI imports do.

- ``PUT    /api/v1/toolkits/<slug>/credentials``: body ``{"scheme", ...secret parts}``; the
  answer (and ``GET``) is metadata only: scheme, non-secret settings, key version, times
- ``GET    /api/v1/toolkits/<slug>/credentials``: ``{"set": false}`` when there is none
- ``DELETE /api/v1/toolkits/<slug>/credentials``
- ``POST   /api/v1/toolkits/mcp``: ``{"slug", "url", "transport"?, "project"?, "dry_run"?,
  "replace"?, "require_approval"?, "auth"?: {"scheme": "bearer"|"header"|"basic", ...}}``;
  remote servers only (the API never runs a command on the server)
- ``PUT    /api/v1/toolkits/<slug>/limits``: ``{"max_response_bytes": N | null}``

``project`` comes from the query string or the body (default ``default``). A URL the egress
guard refuses is 422 ``ssrf_blocked`` naming the field, like the OpenAPI import.
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, Request, response

from appliance.errors import InvalidParams
from appliance.gateway import credentials, imports
from appliance.gateway.admin import credentials as toolkit_credentials
from appliance.web.admin_routes import answers, body, managed, person_only, project, ssrf_unprocessable

bp = Blueprint("admin_credentials", url_prefix="/api/v1")
bp.on_request(person_only)


@bp.put("/toolkits/<slug>/credentials")
@answers(refuse=ssrf_unprocessable)
async def put_credentials(request: Request, slug: str) -> Any:
    doc = body(request)
    return await toolkit_credentials.put(
        request.app.ctx.rt, request.ctx.principal, slug, project(request, doc), doc
    )


@bp.get("/toolkits/<slug>/credentials")
@answers()
async def get_credentials(request: Request, slug: str) -> Any:
    return await toolkit_credentials.show(request.app.ctx.rt, request.ctx.principal, slug, project(request))


@bp.delete("/toolkits/<slug>/credentials")
@answers()
async def delete_credentials(request: Request, slug: str) -> Any:
    kit_project = project(request)
    removed = await toolkit_credentials.clear(request.app.ctx.rt, request.ctx.principal, slug, kit_project)
    return {"toolkit": slug, "project": kit_project, "cleared": removed}


@bp.put("/toolkits/<slug>/limits")
@answers()
async def put_limits(request: Request, slug: str) -> Any:
    doc = body(request)
    if "max_response_bytes" not in doc:
        raise InvalidParams(
            "give 'max_response_bytes' (bytes, or null for the setting)", field="max_response_bytes"
        )
    kit_project = project(request, doc)
    await managed(request, slug, kit_project)
    return await credentials.set_response_cap(
        request.app.ctx.rt, slug, doc["max_response_bytes"], project=kit_project
    )


@bp.post("/toolkits/mcp")
@answers(refuse=ssrf_unprocessable)
async def import_mcp(request: Request) -> Any:
    doc = body(request)
    slug, url = doc.get("slug"), doc.get("url")
    if not isinstance(slug, str) or not slug:
        raise InvalidParams("'slug' must be a non-empty string", field="slug")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InvalidParams("'url' must be the server's http(s) URL", field="url")
    transport = doc.get("transport", "auto")
    if transport not in ("auto", "http", "sse"):
        raise InvalidParams("'transport' must be auto, http or sse", field="transport")
    auth = doc.get("auth")
    if auth is not None and not isinstance(auth, dict):
        raise InvalidParams("'auth' must be an object with a 'scheme'", field="auth")
    flags = {k: doc.get(k, False) for k in ("dry_run", "replace", "require_approval")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise InvalidParams(f"'{key}' must be true or false", field=key)
    connection = imports.mcp_connection(url=url, transport=transport)
    report = await imports.import_mcp(
        request.app.ctx.rt,
        connection,
        slug=slug,
        project=project(request, doc),
        dry_run=flags["dry_run"],
        replace=flags["replace"],
        approve_new=flags["require_approval"],
        credential=auth,
        importer=request.ctx.principal,
    )
    return response.json(report.as_dict(), status=200 if report.dry_run else 201)
