"""The admin API's search routes: the semantic kill switch and the search counters.

``GET /api/v1/search/semantic`` → ``{"enabled", "provider", "model", "embedded", "tools",
"breaker_open", "counts", "last_error"}``
``PUT /api/v1/search/semantic`` with ``{"enabled": false}`` → the same, after switching; takes
effect on the next search of every process using this data directory (it is stored in the
database), with no restart.

Same admin checks as ``web/admin.py`` (Host, Origin, admin key), same error shape.
"""

from __future__ import annotations

from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError, InvalidParams
from appliance.gateway import semantic_admin
from appliance.web.admin import admin_only, body, error_response

bp = Blueprint("admin_search", url_prefix="/api/v1")

bp.on_request(admin_only)


@bp.get("/search/semantic")
async def semantic_status(request: Request) -> HTTPResponse:
    try:
        return response.json(await semantic_admin.status(request.app.ctx.rt))
    except ApplianceError as exc:
        return error_response(exc)


@bp.put("/search/semantic")
async def semantic_switch(request: Request) -> HTTPResponse:
    try:
        doc = body(request)
        if not isinstance(doc.get("enabled"), bool):
            raise InvalidParams('body must be {"enabled": true|false}', field="enabled")
        await semantic_admin.switch(request.app.ctx.rt, doc["enabled"])
        return response.json(await semantic_admin.status(request.app.ctx.rt))
    except ApplianceError as exc:
        return error_response(exc)
