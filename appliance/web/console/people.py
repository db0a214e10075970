"""The console's user pages: every user with their balance (admins), and one user's page
with their agents, keys and credit (that user, or an admin): the admin flag, a grant of
credit (negative: taken back) and the void of a charge, each with a note.

Each route asks one operation of ``gateway/admin`` (``user_pages``, ``people``, ``ledger``);
a user opening another user's page gets 404, as for a user nobody has.
"""

from __future__ import annotations

from sanic import Request
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError, InvalidParams
from appliance.gateway.admin import ledger, people, user_pages
from appliance.web.console import guard
from appliance.web.console.rendering import render
from appliance.web.console.routes import _context, _field, _number, _see_other, bp, failure, number_of

_NOTICES = {
    "created": "User created.",
    "admin": "Admin role saved.",
    "credit": "Credit saved.",
    "void": "Charge voided: its credit and quota use are back.",
    "revoked": "Key revoked: its next request is refused.",
}


@bp.get("/users")
async def users(request: Request) -> HTTPResponse:
    try:
        found = await user_pages.user_rows(
            request.app.ctx.rt, request.ctx.viewer, page=request.args.get("page")
        )
    except ApplianceError as exc:
        return failure(request, exc)
    done = _NOTICES.get(request.args.get("done", ""), "")
    return render("users.html", _context(request, notice=done, **found))


@bp.post("/users")
async def create_user(request: Request) -> HTTPResponse:
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    try:
        guard.check_csrf(request)
        made = await people.create_user(
            rt, viewer, _field(request, "name"), is_admin=_field(request, "is_admin") == "on"
        )
    except ApplianceError as exc:
        return failure(request, exc)
    return _see_other(f"/console/users/{made['id']}?done=created")


@bp.get("/users/<user_id:int>")
async def user(request: Request, user_id: int) -> HTTPResponse:
    try:
        found = await user_pages.user_page(request.app.ctx.rt, request.ctx.viewer, user_id)
    except ApplianceError as exc:
        return failure(request, exc)
    done = _NOTICES.get(request.args.get("done", ""), "")
    return render("user.html", _context(request, notice=done, **found))


def _signed(request: Request, name: str) -> int | float | str:
    """A form's number of credits, which may be negative (credit taken back)."""
    raw = _field(request, name).strip()
    value = number_of(raw.removeprefix("-"))
    if raw.startswith("-") and isinstance(value, int | float):
        return -value
    return value if isinstance(value, int | float) else raw


@bp.post("/users/<user_id:int>/<action:admin|credit|void|revoke>")
async def change_user(request: Request, user_id: int, action: str) -> HTTPResponse:
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    try:
        guard.check_csrf(request)
        if action == "admin":
            await people.set_admin(rt, viewer, user_id, _field(request, "is_admin") == "on")
        elif action == "credit":
            note = _field(request, "note")
            await ledger.grant_credit(rt, viewer, user_id, _signed(request, "amount"), note=note)
        elif action == "void":
            entry = _number(request, "entry")
            if not isinstance(entry, int):
                raise InvalidParams("'entry' must be a ledger entry's number", field="entry")
            await ledger.void(rt, viewer, entry, note=_field(request, "note"))
        else:
            await user_pages.revoke_user_key(rt, viewer, user_id, _field(request, "prefix"))
    except ApplianceError as exc:
        return failure(request, exc)
    return _see_other(f"/console/users/{user_id}?done={action}")
