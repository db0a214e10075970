"""The console's Connections page (issue 19): each person's own connections to ``per_user``
toolkits (status, scopes, expiry), connect, reconnect, disconnect (``gateway/admin/connections``).

Connecting with OAuth starts the authorization bound to this console session (its callback
must come back in the same session) and shows a link to the authorization server: the
console's CSP allows forms to post only to the console (``form-action 'self'``), which a
redirect of the form's answer to another origin would break. The link is the URL the
authorization server's metadata gave, built by ``oauthclient``; nothing in the request
chooses it. Other schemes take the person's own token, key or Basic pair, write-only.
"""

from __future__ import annotations

from urllib.parse import quote

from sanic import Request
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError
from appliance.gateway import connections as connecting
from appliance.gateway.admin import connections, sessions
from appliance.web.console import guard
from appliance.web.console.rendering import render
from appliance.web.console.routes import _context, _field, _see_other, bp, failure

_NOTICES = {
    "1": "Connected.",
    "set": "Your credential is sealed: it is never shown again.",
    "disconnected": "Disconnected: the tokens are deleted (and revoked where the server offers it).",
}


@bp.get("/connections")
async def connections_view(request: Request) -> HTTPResponse:
    try:
        found = await connections.mine(request.app.ctx.rt, request.ctx.viewer)
    except ApplianceError as exc:
        return failure(request, exc)
    notice = _NOTICES.get(request.args.get("connected") or request.args.get("done") or "", "")
    focus = (request.args.get("toolkit") or "", request.args.get("project") or "default")
    return render("connections.html", _context(request, notice=notice, focus=focus, **found))


@bp.get("/connections/finish")
async def finish(request: Request) -> HTTPResponse:
    """The authorization's answer, handed on by ``/oauth/callback``: checked against this
    session (the one that started it), the code exchanged, the tokens sealed."""
    params = {k: v[0] for k, v in request.args.items() if v}
    try:
        await connecting.finish(
            request.app.ctx.rt, params, session_hash=sessions.binding(guard.session_token(request))
        )
    except ApplianceError as exc:
        return failure(request, exc)
    return _see_other("/console/connections?connected=1")


@bp.post("/connections/<project>/<slug>/connect")
async def connect(request: Request, project: str, slug: str) -> HTTPResponse:
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    try:
        guard.check_csrf(request)
        started = await connections.start(
            rt, viewer, slug, project, session_hash=sessions.binding(guard.session_token(request))
        )
    except ApplianceError as exc:
        return failure(request, exc)
    return render("connect.html", _context(request, started=started))


@bp.post("/connections/<project>/<slug>/credential")
async def own_credential(request: Request, project: str, slug: str) -> HTTPResponse:
    fields = {k: _field(request, k) for k in ("scheme", "token", "name", "value", "username", "password")}
    doc = {k: v for k, v in fields.items() if v}
    try:
        guard.check_csrf(request)
        await connections.set_own(request.app.ctx.rt, request.ctx.viewer, slug, project, doc)
    except ApplianceError as exc:
        return failure(request, exc)
    return _see_other(f"/console/connections?done=set&toolkit={quote(slug, safe='')}")


@bp.post("/connections/<project>/<slug>/disconnect")
async def disconnect(request: Request, project: str, slug: str) -> HTTPResponse:
    try:
        guard.check_csrf(request)
        await connections.disconnect(request.app.ctx.rt, request.ctx.viewer, slug, project)
    except ApplianceError as exc:
        return failure(request, exc)
    return _see_other("/console/connections?done=disconnected")


@bp.post("/toolkits/<project>/<slug>/connection-mode")
async def connection_mode(request: Request, project: str, slug: str) -> HTTPResponse:
    try:
        guard.check_csrf(request)
        await connections.set_mode(
            request.app.ctx.rt, request.ctx.viewer, slug, project, _field(request, "mode")
        )
    except ApplianceError as exc:
        return failure(request, exc)
    return _see_other(f"/console/toolkits/{quote(project, safe='')}/{quote(slug, safe='')}#connections")
