"""The console's agent pages: the list, one agent (grants, defaults it opts out of, preloaded
tools, keys), one grant's tool selection.

Each route asks one operation of ``gateway/admin/agent_pages`` (or ``people``, ``grants``,
``keys``) and renders its answer. A new key is shown once, in the answer to the POST that
made it (``no-store``, never in a URL, never on a later page); its form carries a one-time
token (``once``) so that reloading that answer makes no second key. Every other POST answers
with a redirect to the page that shows its effect.
"""

from __future__ import annotations

from sanic import Request
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError, InvalidParams
from appliance.gateway.admin import agent_pages, grants, keys, people
from appliance.web.console import guard, once
from appliance.web.console.rendering import render
from appliance.web.console.routes import _context, _field, _see_other, bp, failure, number_of

_NOTICES = {
    "created": "Agent created.",
    "granted": "Grant made: choose its tools below, or leave none selected for the whole toolkit.",
    "opted-out": "Opted out of that platform default.",
    "grant-saved": "Grant saved.",
    "grant-removed": "Grant removed.",
    "preload": "Preloaded tools saved.",
    "revoked": "Key revoked: its next request is refused.",
    "key-once": "That form was sent already: its key was shown once and is not shown again. "
    "Create another below if you need one.",
}


def notice(request: Request) -> str:
    """What the POST before this page did, in fixed words (never text the client sent)."""
    return _NOTICES.get(request.args.get("done", ""), "")


@bp.get("/agents")
async def agents(request: Request) -> HTTPResponse:
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    try:
        found = await agent_pages.agent_rows(rt, viewer, page=request.args.get("page"))
        users = await people.list_users(rt, viewer) if viewer.is_admin else []
    except ApplianceError as exc:
        return failure(request, exc)
    return render("agents.html", _context(request, users=users, notice=notice(request), **found))


def _user_choice(request: Request) -> int | None:
    raw = _field(request, "user").strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 19):
        raise InvalidParams("'user' must be a user id", field="user")
    return int(raw)


@bp.post("/agents")
async def create_agent(request: Request) -> HTTPResponse:
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    try:
        guard.check_csrf(request)
        made = await people.create_agent(rt, viewer, _field(request, "name"), user=_user_choice(request))
    except ApplianceError as exc:
        return failure(request, exc)
    return _see_other(f"/console/agents/{made['id']}?done=created")


def _agent_page(request: Request, found: dict[str, object], *, new_key: str = "") -> HTTPResponse:
    key_form = once.tokens(request.app.ctx).issue()
    context = _context(request, notice=notice(request), new_key=new_key, key_form=key_form, **found)
    return render("agent.html", context, status=200)


@bp.get("/agents/<agent_id:int>")
async def agent(request: Request, agent_id: int) -> HTTPResponse:
    """The agent's page; with ``HX-Request``, only its "Add tool" form, narrowed by ``kit``
    (the search field swaps it as you type)."""
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    try:
        found = await agent_pages.agent_page(rt, viewer, agent_id, kit=request.args.get("kit"))
    except ApplianceError as exc:
        return failure(request, exc)
    if request.headers.get("hx-request"):
        resp = render("_grantable.html", _context(request, **found))
    else:
        resp = _agent_page(request, found)
    resp.headers["Vary"] = "HX-Request"
    return resp


def _kit_choice(request: Request) -> tuple[str, str]:
    """A toolkit named ``project/slug`` by the form's select."""
    project, sep, slug = _field(request, "toolkit").partition("/")
    if not sep or not project or not slug:
        raise InvalidParams("choose a toolkit", field="toolkit")
    return project, slug


@bp.post("/agents/<agent_id:int>/<action:grant|opt-out|preload|keys|revoke>")
async def change_agent(request: Request, agent_id: int, action: str) -> HTTPResponse:
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    here = f"/console/agents/{agent_id}"
    try:
        guard.check_csrf(request)
        if action in ("grant", "opt-out"):
            project, slug = _kit_choice(request)
            made = await grants.create_grant(
                rt, viewer, agent_id, slug, project=project, enabled=action == "grant"
            )
            if action == "grant":
                return _see_other(f"{here}/grants/{made['id']}?done=granted")
            return _see_other(f"{here}?done=opted-out")
        if action == "preload":
            await agent_pages.set_preload(rt, viewer, agent_id, _field(request, "preload"))
            return _see_other(f"{here}?done=preload")
        if action == "revoke":
            await agent_pages.revoke_agent_key(rt, viewer, agent_id, _field(request, "prefix"))
            return _see_other(f"{here}?done=revoked")
        await agent_pages.agent_page(rt, viewer, agent_id)  # a stranger's agent: 404, nothing spent
        if not once.tokens(request.app.ctx).spend(_field(request, "once")):
            return _see_other(f"{here}?done=key-once")  # a reload of the answer that showed it
        budget = _field(request, "budget").strip()
        secret, _ = await keys.issue(
            rt,
            viewer,
            agent_id=agent_id,
            name=_field(request, "name").strip(),
            scope=keys.scope_from_text(_field(request, "scope").splitlines()),
            budget=number_of(budget) if budget else None,
            expires_at=keys.expiry_from_form(_field(request, "expires_at")),
        )
        found = await agent_pages.agent_page(rt, viewer, agent_id)
    except ApplianceError as exc:
        return failure(request, exc)
    return _agent_page(request, found, new_key=secret)  # the one time the key is shown


@bp.get("/agents/<agent_id:int>/grants/<grant_id:int>")
async def grant(request: Request, agent_id: int, grant_id: int) -> HTTPResponse:
    try:
        found = await agent_pages.grant_page(request.app.ctx.rt, request.ctx.viewer, agent_id, grant_id)
    except ApplianceError as exc:
        return failure(request, exc)
    return render("grant.html", _context(request, notice=notice(request), **found))


@bp.post("/agents/<agent_id:int>/grants/<grant_id:int>/<action:save|remove>")
async def change_grant(request: Request, agent_id: int, grant_id: int, action: str) -> HTTPResponse:
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    try:
        guard.check_csrf(request)
        if action == "remove":
            await agent_pages.delete_agent_grant(rt, viewer, agent_id, grant_id)
            return _see_other(f"/console/agents/{agent_id}?done=grant-removed")
        chosen = [str(t) for t in (request.form.getlist("tools") if request.form else [])]
        enabled = _field(request, "enabled") == "on"
        await agent_pages.set_grant_tools(rt, viewer, agent_id, grant_id, chosen, enabled=enabled)
    except ApplianceError as exc:
        return failure(request, exc)
    return _see_other(f"/console/agents/{agent_id}/grants/{grant_id}?done=grant-saved")
