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
from sanic.response import HTTPResponse

from appliance.access import grants
from appliance.errors import ApplianceError, InvalidParams, UpstreamError
from appliance.gateway import credentials, imports
from appliance.web.admin import body, error_response, person_only

bp = Blueprint("admin_credentials", url_prefix="/api/v1")
bp.on_request(person_only)


async def _managed(request: Request, slug: str, project: str) -> None:
    """The caller owns the toolkit or is an admin; anything else is a toolkit that does not exist."""
    async with request.app.ctx.rt.db.read() as conn:
        await grants.find_toolkit(conn, request.ctx.principal, slug, project)


def _project(request: Request, doc: dict[str, Any] | None = None) -> str:
    value = (doc or {}).get("project", request.args.get("project", "default"))
    if not isinstance(value, str) or not value:
        raise InvalidParams("'project' must be a non-empty string", field="project")
    return value


def _refused(exc: ApplianceError) -> HTTPResponse:
    # A URL the guard refuses is a bad request naming the field (SSRF-01: 422), not a 502.
    if isinstance(exc, UpstreamError) and exc.reason == "ssrf_blocked":
        return error_response(exc, 422)
    return error_response(exc)


@bp.put("/toolkits/<slug>/credentials")
async def put_credentials(request: Request, slug: str) -> HTTPResponse:
    try:
        doc = body(request)
        project = _project(request, doc)
        await _managed(request, slug, project)
        shown = await credentials.set_credential(request.app.ctx.rt, slug, doc, project=project)
    except ApplianceError as exc:
        return _refused(exc)
    return response.json(shown)


@bp.get("/toolkits/<slug>/credentials")
async def get_credentials(request: Request, slug: str) -> HTTPResponse:
    try:
        project = _project(request)
        await _managed(request, slug, project)
        shown = await credentials.show_credential(request.app.ctx.rt, slug, project=project)
    except ApplianceError as exc:
        return error_response(exc)
    return response.json(shown)


@bp.delete("/toolkits/<slug>/credentials")
async def delete_credentials(request: Request, slug: str) -> HTTPResponse:
    try:
        project = _project(request)
        await _managed(request, slug, project)
        removed = await credentials.clear_credential(request.app.ctx.rt, slug, project=project)
    except ApplianceError as exc:
        return error_response(exc)
    return response.json({"toolkit": slug, "project": project, "cleared": removed})


@bp.put("/toolkits/<slug>/limits")
async def put_limits(request: Request, slug: str) -> HTTPResponse:
    try:
        doc = body(request)
        if "max_response_bytes" not in doc:
            raise InvalidParams(
                "give 'max_response_bytes' (bytes, or null for the setting)", field="max_response_bytes"
            )
        project = _project(request, doc)
        await _managed(request, slug, project)
        shown = await credentials.set_response_cap(
            request.app.ctx.rt, slug, doc["max_response_bytes"], project=project
        )
    except ApplianceError as exc:
        return error_response(exc)
    return response.json(shown)


@bp.post("/toolkits/mcp")
async def import_mcp(request: Request) -> HTTPResponse:
    try:
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
            project=_project(request, doc),
            dry_run=flags["dry_run"],
            replace=flags["replace"],
            approve_new=flags["require_approval"],
            credential=auth,
            importer=request.ctx.principal,
        )
    except ApplianceError as exc:
        return _refused(exc)
    return response.json(report.as_dict(), status=200 if report.dry_run else 201)
