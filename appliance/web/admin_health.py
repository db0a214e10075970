"""The admin API's health routes: every toolkit's upstream health, and a probe on demand.

``GET  /api/v1/health/toolkits[?project=P]``  → ``{"toolkits": [{slug, project, source_kind,
health, reason, since}]}``
``POST /api/v1/toolkits/<slug>/probe[?project=P]`` → that row after one probe, plus
``probed`` (false for toolkits that are never probed, such as catalogue imports).

Same admin checks as ``web/admin.py`` (Host, Origin, admin key), same error shape.
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, Request

from appliance.gateway import health
from appliance.web.admin_routes import admin_only, answers

bp = Blueprint("admin_health", url_prefix="/api/v1")


bp.on_request(admin_only)


@bp.get("/health/toolkits")
@answers()
async def toolkits_health(request: Request) -> Any:
    return {"toolkits": await health.toolkit_health(request.app.ctx.rt, project=request.args.get("project"))}


@bp.post("/toolkits/<slug>/probe")
@answers()
async def probe(request: Request, slug: str) -> Any:
    return await health.probe_named(request.app.ctx.rt, slug, project=request.args.get("project", "default"))
