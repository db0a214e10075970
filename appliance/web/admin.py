"""The admin API (``/api/v1``): toolkits and search for operators and scripts.

Every route needs an admin key. Errors are JSON ``{"error": {reason, message, field}}``
with the status the ApplianceError carries.
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError, InvalidParams, UpstreamError
from appliance.gateway import bridge, imports
from appliance.gateway.searching import search_tools
from appliance.web.guards import check_host, check_origin, require_admin

bp = Blueprint("admin", url_prefix="/api/v1")


def error_response(exc: ApplianceError, status: int | None = None) -> HTTPResponse:
    body: dict[str, Any] = {"reason": exc.reason, "message": exc.public_message}
    if exc.field is not None:
        body["field"] = exc.field
    headers = {"WWW-Authenticate": 'Bearer realm="toolspoke"'} if exc.http_status == 401 else None
    return response.json({"error": body}, status=status or exc.http_status, headers=headers)


async def admin_only(request: Request) -> HTTPResponse | None:
    """Every admin route: Host and Origin checks, then an admin key (a response refuses)."""
    try:
        check_host(request, request.app.ctx.rt.settings)
        check_origin(request, request.app.ctx.rt.settings)
        request.ctx.principal = await require_admin(request, request.app.ctx.rt)
    except ApplianceError as exc:
        return error_response(exc)
    return None


bp.on_request(admin_only)


def _body(request: Request) -> dict[str, Any]:
    try:
        doc = request.json
    except Exception:  # noqa: BLE001 - Sanic raises its own type for bad JSON
        raise InvalidParams("request body is not valid JSON", field="body") from None
    if not isinstance(doc, dict):
        raise InvalidParams("request body must be a JSON object", field="body")
    return doc


def _str(doc: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = doc.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"'{key}' must be a non-empty string", field=key)
    return value


@bp.get("/toolkits")
async def toolkits(request: Request) -> HTTPResponse:
    try:
        kits = await bridge.list_toolkits(
            request.app.ctx.rt, request.ctx.principal, project=request.args.get("project")
        )
    except ApplianceError as exc:
        return error_response(exc)
    return response.json({"toolkits": kits})


@bp.post("/toolkits/openapi")
async def import_openapi(request: Request) -> HTTPResponse:
    """Import an OpenAPI spec given by URL (``source``) or inline (``spec``).

    Body: ``{"slug", "source" | "spec", "project"?, "base_url"?, "dry_run"?, "replace"?}``.
    Local file paths are refused here: the API must not read the server's files.
    """
    try:
        doc = _body(request)
        slug = _str(doc, "slug", required=True)
        assert slug is not None
        spec = doc.get("spec")
        source = _str(doc, "source", required=spec is None) or "request body"
        if spec is None and not source.startswith(("http://", "https://")):
            raise InvalidParams(
                "'source' must be an http(s) URL; send a spec inline as 'spec'", field="source"
            )
        data = None
        if spec is not None:
            if not isinstance(spec, dict):
                raise InvalidParams("'spec' must be an OpenAPI document object", field="spec")
            from appliance.db import dumps

            data = dumps(spec).encode()
        report = await imports.import_openapi(
            request.app.ctx.rt,
            source,
            slug=slug,
            project=_str(doc, "project") or "default",
            base_url=_str(doc, "base_url"),
            dry_run=bool(doc.get("dry_run")),
            replace=bool(doc.get("replace")),
            data=data,
        )
    except UpstreamError as exc:
        # A URL the egress guard refuses is a bad request (RELIABILITY.md SSRF-01: 422),
        # not a failing upstream; fetching an allowed URL that then fails stays 502.
        return error_response(exc, 422 if exc.reason == "ssrf_blocked" else None)
    except ApplianceError as exc:
        return error_response(exc)
    return response.json(report.as_dict(), status=200 if report.dry_run else 201)


@bp.delete("/toolkits/<slug>")
async def delete_toolkit(request: Request, slug: str) -> HTTPResponse:
    try:
        removed = await imports.remove_toolkit(
            request.app.ctx.rt, slug, project=request.args.get("project", "default")
        )
    except ApplianceError as exc:
        return error_response(exc)
    return response.json({"deleted": slug, "tools_removed": removed})


@bp.get("/search")
async def search(request: Request) -> HTTPResponse:
    try:
        query = request.args.get("q")
        if not query:
            raise InvalidParams("query parameter 'q' is required", field="q")
        limit_raw = request.args.get("limit")
        try:
            limit = int(limit_raw) if limit_raw else None
        except ValueError:
            raise InvalidParams("'limit' must be an integer", field="limit") from None
        tools, ranking = await search_tools(
            request.app.ctx.rt,
            query,
            principal=request.ctx.principal,
            toolkit=request.args.get("toolkit"),
            project=request.args.get("project"),
            limit=limit,
        )
    except ApplianceError as exc:
        return error_response(exc)
    return response.json({"results": [bridge.describe(t) for t in tools], "ranking": ranking})
