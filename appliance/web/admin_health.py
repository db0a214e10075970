"""The admin API's health routes: every toolkit's upstream health, and a probe on demand.

``GET  /api/v1/health/toolkits[?project=P]``  → ``{"toolkits": [{slug, project, source_kind,
health, reason, since}]}``
``POST /api/v1/toolkits/<slug>/probe[?project=P]`` → that row after one probe, plus
``probed`` (false for toolkits that are never probed, such as catalogue imports).

Same admin checks as ``web/admin.py`` (Host, Origin, admin key), same error shape.
"""

from __future__ import annotations

from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError
from appliance.gateway import health
from appliance.web.admin import admin_only, error_response

bp = Blueprint("admin_health", url_prefix="/api/v1")


bp.on_request(admin_only)


@bp.get("/health/toolkits")
async def toolkits_health(request: Request) -> HTTPResponse:
    try:
        rows = await health.toolkit_health(request.app.ctx.rt, project=request.args.get("project"))
    except ApplianceError as exc:
        return error_response(exc)
    return response.json({"toolkits": rows})


@bp.post("/toolkits/<slug>/probe")
async def probe(request: Request, slug: str) -> HTTPResponse:
    try:
        row = await health.probe_named(
            request.app.ctx.rt, slug, project=request.args.get("project", "default")
        )
    except ApplianceError as exc:
        return error_response(exc)
    return response.json(row)
