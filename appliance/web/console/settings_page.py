"""The console's settings page (admins): the semantic switch, backfill progress, vault key
versions (``gateway/admin/settings``)."""

from __future__ import annotations

from sanic import Request
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError
from appliance.gateway.admin import settings
from appliance.web.console import guard
from appliance.web.console.rendering import render
from appliance.web.console.routes import _context, _field, _see_other, bp, failure


@bp.get("/settings")
async def settings_view(request: Request) -> HTTPResponse:
    try:
        found = await settings.settings_page(request.app.ctx.rt, request.ctx.viewer)
    except ApplianceError as exc:
        return failure(request, exc)
    done = "Semantic search switched." if request.args.get("done") == "semantic" else ""
    return render("settings.html", _context(request, notice=done, **found))


@bp.post("/settings/semantic")
async def semantic_switch(request: Request) -> HTTPResponse:
    try:
        guard.check_csrf(request)
        await settings.switch_semantic(
            request.app.ctx.rt, request.ctx.viewer, _field(request, "enabled") == "on"
        )
    except ApplianceError as exc:
        return failure(request, exc)
    return _see_other("/console/settings?done=semantic")
