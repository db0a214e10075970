"""The console's routes under ``/console``: sign-in and out, toolkit cards, a toolkit's page.

Each route parses its form or query, asks one operation of ``gateway/admin`` and renders its
answer; who may see or change what is decided there, never here. A GET changes nothing; a
POST answers with a redirect (303) to the page that shows its effect, so a reload repeats
nothing. htmx asks for the cards alone (``HX-Request``): the same route renders only them.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError, Forbidden, NotFound, Unauthorized
from appliance.gateway import ledgering
from appliance.gateway.admin import catalogue, connections, grants, ledger, people, sessions
from appliance.gateway.admin import credentials as toolkit_credentials
from appliance.gateway.admin import policy as call_policy
from appliance.models import Principal
from appliance.web.console import guard
from appliance.web.console.rendering import error_context, render, secure, static

PREFIX = "/console"
bp = Blueprint("console", url_prefix=PREFIX)
log = logging.getLogger(__name__)

TYPE_NAMES = {
    "openapi": "OpenAPI",
    "remote": "remote MCP",
    "local": "local MCP",
    "catalog": "catalogue",
    "lore": "Lore knowledge base",
}
HEALTHS = ("active", "degraded", "broken", "starting")
SIGNIN_MAX_AGE_S = 3600
HISTORY_PAGE = 20
HISTORY_FILTERS = ("outcome", "agent", "tool", "since", "until")
_UNROUTED = {
    404: "there is no such page",
    405: "that method is not allowed here",
    413: "the form is too large",
}
# the routes a browser reaches before signing in
_OPEN = ("/console/sign-in", "/console/static/")


@bp.on_request
async def admit(request: Request) -> HTTPResponse | None:
    """Host and Origin checks, then the session: ``request.ctx.viewer`` (None on open routes)."""
    try:
        guard.check_request(request)
    except ApplianceError as exc:
        return failure(request, exc)
    request.ctx.viewer = await guard.viewer(request)
    if request.ctx.viewer is None and not request.path.startswith(_OPEN):
        if request.method != "GET":
            return failure(request, Unauthorized("sign in first: your console session has ended"))
        return _to_sign_in(request)
    return None


@bp.on_response
async def headers(request: Request, resp: HTTPResponse) -> None:
    secure(resp)


def _context(request: Request, **values: Any) -> dict[str, Any]:
    viewer: Principal | None = request.ctx.viewer
    return {"viewer": viewer, "csrf": guard.csrf(request) if viewer else "", **values}


def failure(request: Request, exc: ApplianceError) -> HTTPResponse:
    """An ApplianceError as the console's error page, with the status it carries."""
    status = guard.status_of(exc)
    context = error_context(status, exc.public_message)
    if getattr(request.ctx, "viewer", None) is not None:
        context = _context(request, status=status, message=exc.public_message)
    resp = render("error.html", context, status=status)
    secure(resp)
    return resp


def unrouted(request: Request, exc: Exception) -> HTTPResponse:
    """What the app's error handler answers under ``/console``: a page, never JSON or a trace."""
    if isinstance(exc, ApplianceError):
        return failure(request, exc)
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and 400 <= status < 500:
        message = _UNROUTED.get(status, "the request was refused")
    else:
        status, correlation = 500, secrets.token_hex(8)
        log.error("unhandled error %s on %s %s", correlation, request.method, request.path, exc_info=exc)
        message = f"internal error; reference {correlation}"
    resp = render("error.html", error_context(status, message), status=status)
    secure(resp)
    return resp


def _to_sign_in(request: Request) -> HTTPResponse:
    if request.headers.get("hx-request"):  # htmx would swap the sign-in page into the cards
        return response.empty(status=401, headers={"HX-Redirect": "/console/sign-in"})
    return response.redirect("/console/sign-in", status=303)


def _see_other(url: str) -> HTTPResponse:
    return response.redirect(url, status=303)


# -- signing in and out ------------------------------------------------------------------------


@bp.get("/")
async def home(request: Request) -> HTTPResponse:
    return _see_other("/console/toolkits")


def _sign_in_form(request: Request, *, error: str = "", status: int = 200) -> HTTPResponse:
    token = guard.new_signin_token()
    resp = render("signin.html", {"viewer": None, "csrf": token, "error": error}, status=status)
    guard.set_cookie(request, resp, guard.SIGNIN_COOKIE, token, max_age=SIGNIN_MAX_AGE_S)
    return resp


@bp.get("/sign-in")
async def sign_in_page(request: Request) -> HTTPResponse:
    if request.ctx.viewer is not None:
        return _see_other("/console/toolkits")
    return _sign_in_form(request)


@bp.post("/sign-in")
async def sign_in(request: Request) -> HTTPResponse:
    try:
        guard.check_signin_token(request)
    except ApplianceError as exc:
        return _sign_in_form(request, error=exc.public_message, status=403)
    key = str(request.form.get("key", "") if request.form else "")
    try:
        token, _ = await sessions.sign_in(request.app.ctx.rt, key)
    except (Unauthorized, Forbidden) as exc:
        return _sign_in_form(request, error=exc.public_message, status=exc.http_status)
    resp = _see_other("/console/toolkits")
    guard.set_cookie(request, resp, guard.SESSION_COOKIE, token)
    guard.clear_cookie(request, resp, guard.SIGNIN_COOKIE)
    return resp


@bp.post("/sign-out")
async def sign_out(request: Request) -> HTTPResponse:
    try:
        guard.check_csrf(request)
    except ApplianceError as exc:
        return failure(request, exc)
    await sessions.sign_out(request.app.ctx.rt, guard.session_token(request))
    resp = _see_other("/console/sign-in")
    guard.clear_cookie(request, resp, guard.SESSION_COOKIE)
    return resp


# -- toolkits ----------------------------------------------------------------------------------


@bp.get("/toolkits")
async def toolkits(request: Request) -> HTTPResponse:
    args = request.args
    try:
        found = await catalogue.toolkit_cards(
            request.app.ctx.rt,
            request.ctx.viewer,
            project=args.get("project"),
            type=args.get("type"),
            health=args.get("health"),
            q=args.get("q"),
            page=args.get("page"),
        )
    except ApplianceError as exc:
        return failure(request, exc)
    context = _context(
        request, types=list(TYPE_NAMES.items()), type_names=TYPE_NAMES, healths=HEALTHS, **found
    )
    resp = render("_cards.html" if request.headers.get("hx-request") else "toolkits.html", context)
    resp.headers["Vary"] = "HX-Request"
    return resp


def _count(request: Request, name: str) -> int:
    raw = request.args.get(name, "")
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 6 else 0


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _notice(request: Request) -> str:
    """What the POST before this page did, from fixed words and counts only (never echoed text)."""
    done = request.args.get("done")
    if done == "approved":
        approved = f"Approved {_plural(_count(request, 'n'), 'tool')}."
        held = _count(request, "held")
        if held:
            flagged = _plural(held, "tool")
            return f"{approved} {flagged} flagged by screening still pending: approve each by name."
        return approved
    if done == "access":
        return "Access saved."
    if done == "allowed":
        n = _count(request, "n")
        if n:
            return f"Allow-list saved: {_plural(n, 'tool')} selected."
        return "Allow-list cleared: every active tool is callable."
    if done == "synced":
        added, changed, removed = (_count(request, k) for k in ("added", "changed", "removed"))
        return f"Re-synced: {added} added, {changed} changed (pending approval), {removed} removed."
    if done == "kind":
        return "Kind saved."
    if done == "quota":
        return "Quota and fee saved."
    if done == "imported":
        held = _count(request, "held")
        more = f" {_plural(held, 'tool')} held pending by screening: review below." if held else ""
        docs = _count(request, "docs")
        over = f" over {_plural(docs, 'document')}" if docs else ""
        pending = _count(request, "pending")
        if pending:
            more += f" {_plural(pending, 'tool')} inferred from examples: approve each by name below."
        return f"Imported {_plural(_count(request, 'n'), 'tool')}{over}.{more}"
    if done == "credential":
        return "Credential saved and sealed in the vault. Its value is never shown again."
    if done == "uncredential":
        return "Credential cleared."
    return ""


@bp.get("/toolkits/<project>/<slug>")
async def toolkit(request: Request, project: str, slug: str) -> HTTPResponse:
    rt, viewer, args = request.app.ctx.rt, request.ctx.viewer, request.args
    try:
        found = await catalogue.toolkit_detail(rt, viewer, slug, project)
        quota = await ledger.quota(rt, viewer, slug, project)
        filters = {name: args.get(name) or "" for name in HISTORY_FILTERS}
        calls = await ledger.toolkit_calls(
            rt, viewer, slug, project, **filters, cursor=args.get("cursor"), limit=HISTORY_PAGE
        )
        agents = await people.list_agents(rt, viewer)
        credential = await toolkit_credentials.show(rt, viewer, slug, project)
        schemes = await toolkit_credentials.schemes(rt, viewer, slug, project)
        people_connected = await connections.toolkit_connections(rt, viewer, slug, project)
        dataflow = await _dataflow(rt, viewer, slug, project)
    except ApplianceError as exc:
        return failure(request, exc)
    context = _context(
        request,
        kit=found["toolkit"],
        tools=found["tools"],
        allowed_tools=found["allowed_tools"],
        recent=found["recent_health"],
        type_names=TYPE_NAMES,
        kinds=("read", "write", "destructive", "auto"),
        quota=quota,
        calls=calls["calls"],
        next_cursor=calls["next_cursor"],
        filters=filters,
        agents=agents,
        health_history=found["health_history"],
        credential=credential,
        schemes=schemes,
        connections=people_connected,
        dataflow=dataflow,
        outcomes=ledgering.OUTCOMES,
        notice=_notice(request),
        base=request.path,
    )
    return render("toolkit.html", context)


async def _dataflow(rt: Any, viewer: Principal, slug: str, project: str) -> dict[str, Any] | None:
    """The data-flow labels and guard, for those who may set them (None: not the viewer's)."""
    try:
        shown = await call_policy.toolkit_policy(rt, viewer, slug, project)
    except NotFound:
        return None
    return {"labels": shown["labels"], "guard": shown["dataflow"], "version": shown["version"]}


def _field(request: Request, name: str) -> str:
    return str(request.form.get(name, "") if request.form else "")


# what the toolkit's page says after each change (``_notice``)
_DONE = {
    "approve": "approved",
    "access": "access",
    "allow": "allowed",
    "sync": "synced",
    "kind": "kind",
    "quota": "quota",
}


def _back(request: Request, action: str, **counts: int) -> HTTPResponse:
    """To the toolkit's page, saying what was done (a word and counts, nothing the client sent)."""
    query = "".join(f"&{k}={v}" for k, v in counts.items())
    return _see_other(f"{request.path.removesuffix('/' + action)}?done={_DONE[action]}{query}")


def _number(request: Request, name: str) -> int | float | str:
    """A form's number as the operation takes it (JSON's kinds); anything else is handed on as
    text, for the operation to refuse naming the field."""
    return number_of(_field(request, name).strip())


def number_of(raw: str) -> int | float | str:
    """Form text as a JSON number when it is one, else the text itself."""
    if raw.isascii() and raw.isdigit() and len(raw) <= 18:
        return int(raw)
    if raw.isascii() and len(raw) <= 32 and raw.replace(".", "", 1).isdigit():
        return float(raw)
    return raw


@bp.post("/toolkits/<project>/<slug>/<action:approve|access|allow|sync|kind|quota>")
async def change_toolkit(request: Request, project: str, slug: str, action: str) -> HTTPResponse:
    """Every change to one toolkit: the CSRF token first, then the one operation it names."""
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    try:
        guard.check_csrf(request)
        if action == "approve":
            name = _field(request, "tool")
            tools = None if _field(request, "all") == "1" and not name else [name]
            approved = await catalogue.approve_tools(rt, viewer, slug, project, tools)
            held = {"held": len(approved["held"])} if approved["held"] else {}
            return _back(request, action, n=len(approved["approved"]), **held)
        if action == "access":
            default = None
            if viewer.is_admin:  # only an admin's form has the box; its absence means "no"
                default = _field(request, "default") == "on"
            await grants.set_toolkit_access(
                rt, viewer, slug, project, visibility=_field(request, "visibility") or None, default=default
            )
            return _back(request, action)
        if action == "allow":
            allowed = await catalogue.allow_tool(
                rt, viewer, slug, project, _field(request, "tool"), _field(request, "allowed") == "1"
            )
            return _back(request, action, n=len(allowed))
        if action == "sync":
            report = await catalogue.resync(rt, viewer, slug, project)
            return _back(
                request,
                action,
                added=len(report["added"]),
                changed=len(report["changed"]) + len(report["returned"]),
                removed=len(report["removed"]),
            )
        if action == "quota":
            changes: dict[str, object] = {
                name: _number(request, name) for name in ("fee", "daily_limit", "monthly_limit")
            }
            # a kind's field left empty: no fee of its own, the toolkit's fee applies
            changes["kind_fees"] = {
                kind: _number(request, f"fee_{kind}") if _field(request, f"fee_{kind}").strip() else None
                for kind in ledgering.KINDS
            }
            await ledger.set_quota(rt, viewer, slug, changes, project)
            return _back(request, action)
        await catalogue.reclassify(
            rt, viewer, slug, project, _field(request, "tool"), _field(request, "kind")
        )
        return _back(request, action)
    except ApplianceError as exc:
        return failure(request, exc)


@bp.get("/static/<name>")
async def static_file(request: Request, name: str) -> HTTPResponse:
    return static(request, name)


# the routes of these modules join ``bp`` when they are imported (after it is complete)
from appliance.web.console import imports, toolkit_forms  # noqa: E402, F401
