"""``/mcp``: the MCP streamable HTTP transport (2025-03-26, 2025-06-18, 2025-11-25).

One JSON-RPC message per POST. Requests are answered as JSON when the client accepts it
(no 1 MiB SSE event limit to trip over), else as a one-event SSE stream. A ``tools/call``
carrying ``_meta.progressToken`` from a client that accepts SSE is answered as an SSE stream
once the upstream reports progress: the relayed ``notifications/progress``, then the
response as the last event. In a session whose client declared elicitation, a ``tools/call``
that waits for a person's approval sends its ``elicitation/create`` the same way, on its
POST's stream; the client's answer arrives as a POST of its own. Notifications and
responses get 202. ``initialize`` opens a session (``Mcp-Session-Id``); every later request
must carry it (400 without, 404 once it is gone). The standalone GET stream is not offered
(405): the gateway sends no unsolicited messages.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance.errors import (
    ApplianceError,
    HeaderMismatch,
    InvalidParams,
    InvalidRequest,
    NotFound,
    Unauthorized,
)
from appliance.gateway import direct
from appliance.models import ANONYMOUS, Principal, Toolkit
from appliance.protocol import param_headers, versions
from appliance.protocol.routing import ROUTING_HEADERS, SESSION_HEADER, VERSION_HEADER
from appliance.rpc import jsonrpc, mcp
from appliance.rpc.session import Session, SessionStore, is_modern, modern_context
from appliance.web import mcp_replies as replies
from appliance.web.guards import authenticate, bearer_token, check_host, check_origin
from appliance.web.mcp_replies import rpc_error

bp = Blueprint("mcp")


def _accept_ok(request: Request) -> bool:
    accept = request.headers.get("accept")
    if not accept:
        return True  # lenient: many simple clients send none
    return any(t in accept for t in ("application/json", "text/event-stream", "*/*", "application/*"))


async def _answer(
    request: Request,
    ctx: mcp.CallContext,
    msg: jsonrpc.Message,
    headers: dict[str, str],
    modern_era: bool,
    session: Session | None = None,
) -> HTTPResponse | None:
    """Run one request; in a legacy ``session``, as a call notifications/cancelled can stop.

    2026-07-28 has no cancel notification on HTTP: the client closes the connection, and
    Sanic cancels this handler, which cancels the work it awaits, down to the upstream.
    """
    asks = session is not None and session.elicits()
    stream = replies.progress_stream(request, ctx, msg, headers, asks=asks)
    if stream is not None:
        ctx.notify = stream.notify
        if session is not None:  # an elicitation/create goes on this stream, its answer comes by POST
            ctx.elicit = session.asker(stream.request)
    if session is None or session.running(msg.id):
        # Nothing can cancel it but the connection: no task of its own needed.
        reply = await mcp.respond(request.app.ctx.rt, ctx, msg)
        return await replies.send(request, stream, reply, headers, modern_era)
    work = asyncio.ensure_future(mcp.respond(request.app.ctx.rt, ctx, msg))
    session.track(msg.id, work)
    try:
        reply = await work
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # the client went away: nothing to answer
        return await replies.unanswered(request, stream, headers)
    return await replies.send(request, stream, reply, headers, modern_era)


async def _serve_modern(
    request: Request, principal: Any, msg: jsonrpc.Message, kit: Toolkit | None
) -> HTTPResponse | None:
    """One stateless request: no session is read, minted or echoed."""
    if msg.kind != "request":
        return response.empty(status=202)
    routing = {name: request.headers.getall(name, []) for name in ROUTING_HEADERS}
    try:
        ctx = modern_context(principal, msg, headers=routing, toolkit=kit)
    except ApplianceError as exc:
        return rpc_error(exc, msg.id, status=400)
    # A message refused for its nesting reaches the dispatcher's refusal untouched.
    problem = None if msg.refusal else await _param_header_problem(request, principal, msg, kit)
    if problem is not None:
        return rpc_error(HeaderMismatch(problem, field="mcp-param"), msg.id, status=400)
    return await _answer(request, ctx, msg, {}, modern_era=True)


async def _param_header_problem(
    request: Request, principal: Principal, msg: jsonrpc.Message, kit: Toolkit | None
) -> str | None:
    """SEP-2243: a 2026-07-28 tools/call on a toolkit endpoint must mirror each argument whose
    property carries ``x-mcp-header`` into its ``Mcp-Param-*`` header, exactly (the bridge lists
    only its own tools, which have no such property)."""
    name, arguments = msg.params.get("name"), msg.params.get("arguments") or {}
    if (
        kit is None
        or msg.method != "tools/call"
        or not isinstance(name, str)
        or not isinstance(arguments, dict)
    ):
        return None  # a malformed call is refused later, with the error that names its field
    schema = await direct.input_schema(request.app.ctx.rt, principal, kit, name)
    if schema is None:
        return None
    headers: dict[str, list[str]] = {}
    for key, value in request.headers.items():
        if key.lower().startswith(param_headers.PREFIX):
            headers.setdefault(key.lower(), []).append(value)
    return param_headers.mismatch(schema, arguments, headers)


def _sessions(request: Request) -> SessionStore:
    store: SessionStore = request.app.ctx.sessions
    return store


async def preflight(request: Request) -> Any:
    rt = request.app.ctx.rt
    check_host(request, rt.settings)
    check_origin(request, rt.settings)
    return await authenticate(request, rt)


async def _scope(
    request: Request, principal: Principal, slug: str | None, project: str | None
) -> tuple[Toolkit | None, str]:
    """The toolkit an endpoint serves (None: the bridge) and its session scope."""
    if slug is None:
        return None, ""
    kit = await direct.resolve_toolkit(request.app.ctx.rt, principal, slug, project=project)
    return kit, f"{kit.project}.{kit.slug}"


# What a caller without a key may ask of a published toolkit's endpoint (issue 4: listing
# is public, calling needs a key).
_PUBLIC_METHODS = {"initialize", "ping", "tools/list", "server/discover"}


async def _caller(
    request: Request, slug: str | None, project: str | None
) -> tuple[Principal, Toolkit | None, str]:
    """Who is calling and what they reach here. Without a key, only a published toolkit's
    endpoint answers (anonymously); anything else needs a key, as before."""
    if slug is not None and bearer_token(request) is None:
        rt = request.app.ctx.rt
        check_host(request, rt.settings)
        check_origin(request, rt.settings)
        try:
            kit, scope = await _scope(request, ANONYMOUS, slug, project)
        except (NotFound, InvalidParams):
            # An unpublished toolkit and a missing one both simply need a key.
            raise Unauthorized("an API key is required: send 'Authorization: Bearer <key>'") from None
        return ANONYMOUS, kit, scope
    principal = await preflight(request)
    try:
        kit, scope = await _scope(request, principal, slug, project)
    except NotFound as exc:  # a toolkit this key cannot see: a tools/call to it still has its row
        if request.method == "POST":
            await mcp.refused_unreachable(request.app.ctx.rt, principal, request.body, exc)
        raise
    return principal, kit, scope


@bp.post("/mcp")
async def post_mcp(request: Request) -> HTTPResponse | None:
    return await _post(request, None, None)


@bp.post("/mcp/<slug:str>")
async def post_toolkit_mcp(request: Request, slug: str) -> HTTPResponse | None:
    return await _post(request, slug, None)


@bp.post("/mcp/<project:str>/<slug:str>")
async def post_project_toolkit_mcp(request: Request, project: str, slug: str) -> HTTPResponse | None:
    return await _post(request, slug, project)


async def _post(request: Request, slug: str | None, project: str | None) -> HTTPResponse | None:
    with request.app.ctx.rt.db.one_look():  # remembered lookups: one look per request
        return await _post_once(request, slug, project)


async def _post_once(request: Request, slug: str | None, project: str | None) -> HTTPResponse | None:
    try:
        principal, kit, scope = await _caller(request, slug, project)
    except ApplianceError as exc:
        return rpc_error(exc)
    content_type = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
    if content_type != "application/json":
        return rpc_error(
            InvalidRequest("Content-Type must be application/json", field="content-type"), status=415
        )
    if not _accept_ok(request):
        return rpc_error(
            InvalidRequest("Accept must list application/json or text/event-stream", field="accept"),
            status=406,
        )
    try:
        msg = jsonrpc.parse(request.body)
    except InvalidRequest as exc:
        return rpc_error(exc, exc.data.get("id"), status=400)
    if principal.anonymous and msg.kind == "request" and msg.method not in _PUBLIC_METHODS:
        return rpc_error(
            Unauthorized(f"{msg.method} needs an API key: send 'Authorization: Bearer <key>'"), msg.id
        )

    if is_modern(msg, request.headers.get(VERSION_HEADER)):
        return await _serve_modern(request, principal, msg, kit)
    return await _serve_legacy(request, principal, msg, kit, scope)


async def _serve_legacy(
    request: Request, principal: Principal, msg: jsonrpc.Message, kit: Toolkit | None, scope: str
) -> HTTPResponse | None:
    """A request of a 2025-era session: ``initialize`` opens one, every later message names
    it in ``Mcp-Session-Id``."""
    rt = request.app.ctx.rt
    sessions = _sessions(request)
    headers: dict[str, str] = {}
    if msg.method == "initialize" and msg.kind == "request":
        opening = Session(principal.key_prefix, scope)
        reply = await opening.initialize(rt, principal, msg, kit)
        if opening.protocol_version is not None:
            headers[SESSION_HEADER] = sessions.add(opening).id
        return replies.one_reply(request, reply, headers)

    session_id = request.headers.get(SESSION_HEADER)
    if session_id is None:
        if msg.kind == "request" and msg.method == "server/discover":
            # A discover without the modern envelope: answer it for what it is asking.
            return replies.json_reply(
                jsonrpc.result(msg.id, {**mcp.discover_result(kit), "resultType": "complete"})
            )
        if msg.kind == "request" and msg.method == "ping":
            return replies.one_reply(request, jsonrpc.result(msg.id, {}), headers)
        return rpc_error(
            InvalidRequest("missing Mcp-Session-Id header: send initialize first", field="mcp-session-id"),
            msg.id,
            status=400,
        )
    session = sessions.get(session_id, principal.key_prefix, scope)
    if session is None:
        return rpc_error(
            InvalidRequest("session not found or expired: initialize again", field="mcp-session-id"),
            msg.id,
            status=404,
        )
    version = request.headers.get(VERSION_HEADER)
    if version is not None and version not in versions.LEGACY_VERSIONS:
        return rpc_error(
            InvalidRequest(
                f"unsupported MCP-Protocol-Version {version!r}",
                field="mcp-protocol-version",
                data={"supported": list(versions.LEGACY_VERSIONS)},
            ),
            msg.id,
            status=400,
        )
    if msg.kind != "request":
        session.notice(msg)
        return response.empty(status=202)
    ctx = session.context(principal, kit)
    return await _answer(request, ctx, msg, headers, modern_era=False, session=session)


@bp.get("/mcp")
@bp.get("/mcp/<slug:str>", name="get_toolkit_mcp")
@bp.get("/mcp/<project:str>/<slug:str>", name="get_project_toolkit_mcp")
async def get_mcp(request: Request, slug: str | None = None, project: str | None = None) -> HTTPResponse:
    try:
        await preflight(request)
    except ApplianceError as exc:
        return rpc_error(exc)
    return response.text(
        "this server offers no standalone SSE stream; POST requests instead",
        status=405,
        headers={"Allow": "POST, DELETE"},
    )


@bp.delete("/mcp")
@bp.delete("/mcp/<slug:str>", name="delete_toolkit_mcp")
@bp.delete("/mcp/<project:str>/<slug:str>", name="delete_project_toolkit_mcp")
async def delete_mcp(request: Request, slug: str | None = None, project: str | None = None) -> HTTPResponse:
    try:
        principal, _, scope = await _caller(request, slug, project)
    except ApplianceError as exc:
        return rpc_error(exc)
    session_id = request.headers.get(SESSION_HEADER)
    if session_id is None:
        return rpc_error(InvalidRequest("missing Mcp-Session-Id header", field="mcp-session-id"), status=400)
    if not _sessions(request).delete(session_id, principal.key_prefix, scope):
        return rpc_error(InvalidRequest("session not found", field="mcp-session-id"), status=404)
    return response.empty(status=204)
