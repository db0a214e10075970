"""The console's approval queue (issue 20): calls under an ``approve`` rule that wait for a
person's yes, with what each would do (tool, kind, its arguments as canonical JSON, escaped
by the template like every value), what it costs, who asked, when, and until when; approve
and deny are CSRF-checked forms. ``gateway/admin/approvals.py`` decides who sees and decides
what: the same operation as ``/api/v1/approvals`` and ``toolspoke approvals``.
"""

from __future__ import annotations

from sanic import Request
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError
from appliance.gateway.admin import approvals as queue
from appliance.web.console import guard
from appliance.web.console.rendering import render
from appliance.web.console.routes import _context, _see_other, bp, failure

_NOTICES = {
    "approved": "Approved: the agent's retry with this approval runs the call once.",
    "denied": "Denied: the call will not run.",
}
STATES = ("open", "pending", "approved", "denied", "used", "expired")


@bp.get("/approvals")
async def approvals(request: Request) -> HTTPResponse:
    state = request.args.get("state") or "open"
    try:
        found = await queue.list_approvals(request.app.ctx.rt, request.ctx.viewer, state=state)
    except ApplianceError as exc:
        return failure(request, exc)
    done = _NOTICES.get(request.args.get("done", ""), "")
    return render("approvals.html", _context(request, notice=done, states=STATES, **found))


@bp.post("/approvals/<approval_id:str>/<verdict:approve|deny>")
async def decide(request: Request, approval_id: str, verdict: str) -> HTTPResponse:
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    try:
        guard.check_csrf(request)
        await queue.decide(rt, viewer, approval_id, approve=verdict == "approve")
    except ApplianceError as exc:
        return failure(request, exc)
    return _see_other(f"/console/approvals?done={'approved' if verdict == 'approve' else 'denied'}")
