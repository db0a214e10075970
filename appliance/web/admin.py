"""The admin API (``/api/v1``): toolkits and search for operators, owners and scripts.

Every route needs a user's key (never an agent's). Admins see and manage every toolkit; a
user imports toolkits they then own (at most ``imports_per_hour`` an hour), removes their
own, and lists and searches what they may see. Errors are JSON
``{"error": {reason, message, field, ...}}`` with the status the ApplianceError carries.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance.access import grants, principals
from appliance.errors import ApplianceError, InvalidParams, UpstreamError
from appliance.gateway import bridge, imports
from appliance.gateway.searching import search_tools
from appliance.models import Principal
from appliance.web.guards import authenticate, check_host, check_origin, require_admin

bp = Blueprint("admin", url_prefix="/api/v1")


def error_response(exc: ApplianceError, status: int | None = None) -> HTTPResponse:
    doc: dict[str, Any] = {"reason": exc.reason, "message": exc.public_message}
    if exc.field is not None:
        doc["field"] = exc.field
    if "retry_after_s" in exc.data:
        doc["retry_after_s"] = exc.data["retry_after_s"]
    headers = {"WWW-Authenticate": 'Bearer realm="toolspoke"'} if exc.http_status == 401 else {}
    if "retry_after_s" in exc.data:
        headers["Retry-After"] = str(exc.data["retry_after_s"])
    return response.json({"error": doc}, status=status or exc.http_status, headers=headers or None)


async def admin_only(request: Request) -> HTTPResponse | None:
    """Every admin route: Host and Origin checks, then an admin key (a response refuses)."""
    try:
        check_host(request, request.app.ctx.rt.settings)
        check_origin(request, request.app.ctx.rt.settings)
        request.ctx.principal = await require_admin(request, request.app.ctx.rt)
    except ApplianceError as exc:
        return error_response(exc)
    return None


async def person_only(request: Request) -> HTTPResponse | None:
    """Host and Origin checks, then a user's key (admin or not; an agent's key is refused)."""
    try:
        check_host(request, request.app.ctx.rt.settings)
        check_origin(request, request.app.ctx.rt.settings)
        principal = await authenticate(request, request.app.ctx.rt)
        principals.require_person(principal)
        request.ctx.principal = principal
    except ApplianceError as exc:
        return error_response(exc)
    return None


bp.on_request(person_only)


def _viewer(request: Request) -> Principal:
    """Whose view a listing shows: an admin's is the whole appliance's."""
    principal: Principal = request.ctx.principal
    return replace(principal, operator=True) if principal.is_admin else principal


def body(request: Request) -> dict[str, Any]:
    try:
        doc = request.json
    except Exception:  # noqa: BLE001 - Sanic raises its own type for bad JSON
        raise InvalidParams("request body is not valid JSON", field="body") from None
    if not isinstance(doc, dict):
        raise InvalidParams("request body must be a JSON object", field="body")
    _check_text(doc, "body")
    return doc


def _check_text(value: Any, where: str) -> None:
    """JSON may escape lone surrogates (\\ud800), which no UTF-8 store can hold: refuse them."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidParams(f"'{where}' holds text that is not valid Unicode", field=where) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, where)
            _check_text(item, key if where == "body" else where)
    elif isinstance(value, list):
        for item in value:
            _check_text(item, where)


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
            request.app.ctx.rt, _viewer(request), project=request.args.get("project")
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
        doc = body(request)
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
            importer=request.ctx.principal,
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
        project = request.args.get("project", "default")
        async with request.app.ctx.rt.db.read() as conn:
            await grants.find_toolkit(conn, request.ctx.principal, slug, project)  # theirs, or 404
        removed = await imports.remove_toolkit(request.app.ctx.rt, slug, project=project)
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
            principal=_viewer(request),
            toolkit=request.args.get("toolkit"),
            project=request.args.get("project"),
            limit=limit,
        )
    except ApplianceError as exc:
        return error_response(exc)
    return response.json({"results": [bridge.describe(t) for t in tools], "ranking": ranking})
