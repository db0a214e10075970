"""The console's overview page: the figures of ``gateway/admin/overview`` as charts drawn on
the server (inline SVG: no script, readable as it comes, every label escaped by the
template), each chart of a fixed size whatever the figures."""

from __future__ import annotations

from typing import Any

from sanic import Request
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError
from appliance.gateway.admin import overview as figures
from appliance.web.console.rendering import render
from appliance.web.console.routes import _context, bp, failure

COLUMN_W = 10  # one minute's column in the calls chart (60 of them)
CHART_H = 100
BAR_W = 300  # the longest bar of a ranking


def minute_columns(minutes: list[dict[str, Any]]) -> dict[str, Any]:
    """Each minute's column: its height for all calls and for those that failed or were refused."""
    top = max((m["calls"] for m in minutes), default=0) or 1
    columns = []
    for i, m in enumerate(minutes):
        bad = m["errors"] + m["refusals"]
        columns.append(
            {
                "x": i * COLUMN_W,
                "h": round(CHART_H * m["calls"] / top, 1),
                "bad_h": round(CHART_H * bad / top, 1),
                "label": (
                    f"{m['at'][11:16]} UTC: {m['calls']} calls, {m['errors']} errors, {m['refusals']} refused"
                ),
            }
        )
    return {"columns": columns, "top": top, "width": COLUMN_W * len(minutes), "height": CHART_H}


def ranking(items: list[dict[str, Any]], value: str) -> list[dict[str, Any]]:
    """Bars for a ranked list: each item with its bar's length (the biggest: ``BAR_W``)."""
    top = max((float(i[value]) for i in items), default=0.0) or 1.0
    return [{**i, "bar": round(BAR_W * float(i[value]) / top, 1), "y": n * 22} for n, i in enumerate(items)]


@bp.get("/overview")
async def overview(request: Request) -> HTTPResponse:
    try:
        found = await figures.overview(request.app.ctx.rt, request.ctx.viewer)
    except ApplianceError as exc:
        return failure(request, exc)
    context = _context(
        request,
        chart=minute_columns(found["minutes"]),
        top_bars=ranking(found["top_tools"], "calls"),
        kit_bars=ranking(
            [{**s, "name": f"{s['project']}/{s['toolkit']}"} for s in found["spend_by_toolkit"]], "month"
        ),
        caller_bars=ranking(found["spend_by_caller"], "month"),
        bar_w=BAR_W,
        **found,
    )
    return render("overview.html", context)
