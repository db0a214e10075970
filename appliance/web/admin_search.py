"""The admin API's search routes: the semantic kill switch and the search counters.

``GET /api/v1/search/semantic`` → ``{"enabled", "provider", "model", "query_adapter", "embedded", "tools",
"breaker_open", "counts", "last_error"}``
``PUT /api/v1/search/semantic`` with ``{"enabled": false}`` → the same, after switching; takes
effect on the next search of every process using this data directory (it is stored in the
database), with no restart.

Same admin checks as ``web/admin.py`` (Host, Origin, admin key), same error shape.
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, Request

from appliance.errors import InvalidParams
from appliance.gateway import semantic_admin
from appliance.web.admin_routes import admin_only, answers, body

bp = Blueprint("admin_search", url_prefix="/api/v1")

bp.on_request(admin_only)


@bp.get("/search/semantic")
@answers()
async def semantic_status(request: Request) -> Any:
    return await semantic_admin.status(request.app.ctx.rt)


@bp.put("/search/semantic")
@answers()
async def semantic_switch(request: Request) -> Any:
    doc = body(request)
    if not isinstance(doc.get("enabled"), bool):
        raise InvalidParams('body must be {"enabled": true|false}', field="enabled")
    await semantic_admin.switch(request.app.ctx.rt, doc["enabled"])
    return await semantic_admin.status(request.app.ctx.rt)
