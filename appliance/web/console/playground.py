"""The console's search playground: ``search_tools`` as the viewer or as one of their agents,
with the explain view (``gateway/admin/playground``). A GET form: a search changes nothing."""

from __future__ import annotations

from sanic import Request
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError, InvalidParams
from appliance.gateway.admin import people, playground
from appliance.web.console.rendering import render
from appliance.web.console.routes import _context, bp, failure


def _whole(raw: str, field: str) -> int | None:
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 19):
        raise InvalidParams(f"'{field}' must be a whole number", field=field)
    return int(raw)


@bp.get("/search")
async def search(request: Request) -> HTTPResponse:
    rt, viewer, args = request.app.ctx.rt, request.ctx.viewer, request.args
    query = args.get("q", "")
    try:
        agent = _whole(args.get("agent", ""), "agent")
        limit = _whole(args.get("limit", ""), "limit")
        agents = await people.list_agents(rt, viewer)
        found = await playground.search(rt, viewer, query, agent_id=agent, limit=limit)
        misses = await playground.recent_misses(rt, viewer)
    except ApplianceError as exc:
        return failure(request, exc)
    context = _context(
        request,
        q=query,
        agent=agent,
        limit=limit or rt.settings.search_default_limit,
        max_limit=rt.settings.search_max_limit,
        agents=agents,
        misses=misses,
        usage_log=rt.settings.search_usage_log,
        usage_window=int(rt.settings.search_usage_window_s),
        **found,
    )
    return render("search.html", context)
