"""``GET /sse`` + ``POST /messages``: the legacy HTTP+SSE transport (MCP 2024-11-05).

For clients that have not moved to streamable HTTP. ``GET /sse`` (or ``/sse/<slug>``,
``/sse/<project>/<slug>`` for one toolkit, as on ``/mcp``) opens an event stream whose first
event, ``endpoint``, names the URL to POST messages to; each POST carries one JSON-RPC
message, is answered 202 at once, and its response travels back as a ``message`` event.

The stream *is* the session: it lives exactly as long as the connection, so there is no
expiry to manage and nothing survives a disconnect. Like every face, this one only frames:
each message goes to the stream's ``rpc.session.Session`` with the principal of the POST's
own key, which must be the key that opened the stream (anything else looks like no session).
Only the handshake era is spoken here; the 2026-07-28 revision defines no SSE transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sanic import Blueprint, Request, Sanic, response
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError, InvalidRequest
from appliance.gateway import direct
from appliance.gateway.runtime import Runtime
from appliance.models import CallResult, Principal, Toolkit
from appliance.rpc import jsonrpc, mcp
from appliance.rpc.session import Session
from appliance.web.mcp import preflight
from appliance.web.mcp_replies import rpc_error as error_response

bp = Blueprint("sse")
OUTBOX_SIZE = 16  # events waiting for a slow reader; their producers wait beyond this
MAX_IN_FLIGHT = 32  # requests running per stream; more is refused (429), not queued
KEEPALIVE_S = 15.0  # also keeps Sanic's RESPONSE_TIMEOUT (reset by each write) from firing
# SDK 2.x clients drop the whole SSE connection on an event over 1 MiB, and on this
# transport nothing else can carry a reply, so a bigger reply becomes an error instead.
MAX_EVENT_BYTES = 1024 * 1024
SHUTDOWN_GRACE_S = 5.0


class TooManyInFlight(InvalidRequest):
    http_status = 429
    reason = "too_many_requests"


class TooManyStreams(ApplianceError):
    http_status = 503
    reason = "too_many_streams"


class TooManyKeyStreams(ApplianceError):
    http_status = 429
    reason = "too_many_streams"


class TooLarge(ApplianceError):
    reason = "response_too_large"


@dataclass(eq=False)
class Stream:
    """One open ``GET /sse``: the session it is, and the events waiting for its reader."""

    id: str
    key_prefix: str
    slug: str | None
    project: str | None
    outbox: asyncio.Queue[bytes | None] = field(default_factory=lambda: asyncio.Queue(OUTBOX_SIZE))
    closing: bool = False
    session: Session = field(init=False)

    def __post_init__(self) -> None:
        self.session = Session(self.key_prefix, id=self.id, speaks_modern=False)

    @property
    def tasks(self) -> dict[Any, asyncio.Future[Any]]:
        """The requests still running on this stream, by id."""
        return self.session.in_flight

    async def receive(
        self, rt: Runtime, principal: Principal, kit: Toolkit | None, msg: jsonrpc.Message
    ) -> None:
        if msg.kind != "request":
            self.session.notice(msg)  # a notification, or the answer to an elicitation/create
            return
        if msg.method == "initialize":
            # Answered before the 202 so that a client pipelining its next request behind
            # the handshake finds the version already negotiated.
            reply = await self.session.answer(rt, principal, msg, toolkit=kit)
            await self.outbox.put(_event(reply, msg))
            return
        if self.session.running(msg.id):
            # Ids are unique per session; a second task under one id could not be cancelled.
            raise InvalidRequest("a request with this id is still running on this stream", field="id")
        if len(self.session.in_flight) >= MAX_IN_FLIGHT:
            raise TooManyInFlight(f"at most {MAX_IN_FLIGHT} requests may run at once on a stream")
        self.session.track(msg.id, asyncio.create_task(self._answer(rt, principal, kit, msg)))

    async def _answer(
        self, rt: Runtime, principal: Principal, kit: Toolkit | None, msg: jsonrpc.Message
    ) -> None:
        # Relayed progress and logs go ahead of the reply.
        reply = await self.session.answer(rt, principal, msg, toolkit=kit, notify=self.notify)
        await self.outbox.put(_event(reply, msg))

    async def notify(self, message: dict[str, Any]) -> None:
        data = jsonrpc.encode(message)
        if len(data) <= MAX_EVENT_BYTES:  # an oversized notification would drop the stream
            await self.outbox.put(b"event: message\ndata: " + data + b"\n\n")

    def close(self) -> None:
        self.closing = True
        self.session.cancel_all()
        # Wakes a writer waiting for events; a full outbox means it is not waiting.
        with contextlib.suppress(asyncio.QueueFull):
            self.outbox.put_nowait(None)


def _event(reply: dict[str, Any], msg: jsonrpc.Message) -> bytes:
    data = jsonrpc.encode(reply)  # compact JSON: never a newline, so one data: line
    if len(data) > MAX_EVENT_BYTES:
        text = (
            f"the reply is {len(data)} bytes; the legacy SSE transport carries at most {MAX_EVENT_BYTES}"
            " per message. Ask for less, or use the streamable HTTP endpoint /mcp"
        )
        if msg.method == "tools/call" and "result" in reply:
            # A tool result the model can read and act on, rather than a protocol error.
            refusal = CallResult(
                content=[{"type": "text", "text": text}], is_error=True, meta={"reason": TooLarge.reason}
            )
            data = jsonrpc.encode(jsonrpc.result(msg.id, mcp.tool_result(refusal)))
        else:
            data = jsonrpc.encode(jsonrpc.error(msg.id, TooLarge(text)))
    return b"event: message\ndata: " + data + b"\n\n"


class Hub:
    """The open streams of one app, and the means to end them all at shutdown."""

    def __init__(self, limit: int, per_key: int = 0) -> None:
        self.limit = limit
        self.per_key = per_key  # 0: no cap per key (RATE-05)
        self.streams: dict[str, Stream] = {}
        self.held: Counter[str] = Counter()  # open streams per key prefix
        self.stopping = False
        self._empty = asyncio.Event()
        self._empty.set()

    def open(self, key_prefix: str, slug: str | None, project: str | None) -> Stream:
        # 32 random bytes: the id is the capability to post, so it must be unguessable.
        stream = Stream(secrets.token_urlsafe(32), key_prefix, slug, project)
        self.streams[stream.id] = stream
        self.held[key_prefix] += 1
        self._empty.clear()
        return stream

    def find(self, stream_id: str, key_prefix: str) -> Stream | None:
        stream = self.streams.get(stream_id)
        # Another key's stream answers exactly like an unknown one: no oracle for ids. Once the
        # server is stopping, no stream takes new requests.
        if (
            stream is None
            or stream.closing
            or self.stopping
            or not secrets.compare_digest(stream.key_prefix, key_prefix)
        ):
            return None
        return stream

    def discard(self, stream: Stream) -> None:
        stream.close()
        if self.streams.pop(stream.id, None) is not None:
            self.held[stream.key_prefix] -= 1
            if not self.held[stream.key_prefix]:
                del self.held[stream.key_prefix]
        if not self.streams:
            self._empty.set()

    async def shutdown(self) -> None:
        """End every stream cleanly, before the runtime their requests use closes.

        Requests already running get ``SHUTDOWN_GRACE_S`` to answer on their stream (CRASH-07);
        what still runs then is cancelled (audited ``interrupted`` if it was a tool call).
        """
        self.stopping = True  # no new requests: find() knows no stream any more
        streams = list(self.streams.values())
        tasks = [task for stream in streams for task in stream.session.in_flight.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_S)
        for stream in streams:
            stream.close()
        # A writer blocked on a client that does not read is left to Sanic's graceful close.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._empty.wait(), SHUTDOWN_GRACE_S)


def _hub(app: Sanic) -> Hub:
    hub: Hub = app.ctx.sse_hub
    return hub


async def _toolkit(
    request: Request, principal: Principal, slug: str | None, project: str | None
) -> Toolkit | None:
    if slug is None:
        return None
    return await direct.resolve_toolkit(request.app.ctx.rt, principal, slug, project=project)


@bp.get("/sse")
@bp.get("/sse/<slug:str>", name="sse_toolkit")
@bp.get("/sse/<project:str>/<slug:str>", name="sse_project_toolkit")
async def open_stream(
    request: Request, slug: str | None = None, project: str | None = None
) -> HTTPResponse | None:
    hub = _hub(request.app)
    try:
        principal = await preflight(request)
        await _toolkit(request, principal, slug, project)  # an unknown toolkit is 404 now, not a dead stream
        if hub.stopping or len(hub.streams) >= hub.limit:
            raise TooManyStreams("too many open SSE streams; try again later")
        if hub.per_key and hub.held[principal.key_prefix] >= hub.per_key:
            # One key's streams must not use up everyone's (RATE-05).
            raise TooManyKeyStreams(
                f"this key already holds {hub.per_key} open SSE streams (TOOLSPOKE_MAX_STREAMS_PER_KEY); "
                "close one first"
            )
    except ApplianceError as exc:
        return error_response(exc)
    stream = hub.open(principal.key_prefix, slug, project)
    try:
        sse = await request.respond(
            content_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
        # A relative URL: the client resolves it against the stream's own origin.
        await sse.send(f"event: endpoint\ndata: /messages?session_id={stream.id}\n\n".encode())
        keepalive = min(KEEPALIVE_S, float(request.app.config.RESPONSE_TIMEOUT) / 4)
        # Once closing, what is already in the outbox (replies of requests that finished
        # during a shutdown) is still written before the stream ends.
        while not stream.closing or not stream.outbox.empty():
            try:
                event = await asyncio.wait_for(stream.outbox.get(), keepalive)
            except TimeoutError:
                event = b": keep-alive\n\n"
            if event is None:
                break
            await sse.send(event)
        await sse.eof()
    finally:
        # Also reached when Sanic cancels this handler because the client went away.
        hub.discard(stream)
    return None


@bp.post("/messages")
async def post_message(request: Request) -> HTTPResponse:
    try:
        principal = await preflight(request)
    except ApplianceError as exc:
        return error_response(exc)
    stream_id = request.args.get("session_id")
    if not stream_id:
        return error_response(InvalidRequest("missing session_id: open GET /sse first", field="session_id"))
    stream = _hub(request.app).find(stream_id, principal.key_prefix)
    if stream is None:
        return error_response(
            InvalidRequest("session not found or closed: open GET /sse again", field="session_id"), status=404
        )
    content_type = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
    if content_type != "application/json":
        return error_response(
            InvalidRequest("Content-Type must be application/json", field="content-type"), status=415
        )
    try:
        msg = jsonrpc.parse(request.body)
    except InvalidRequest as exc:
        return error_response(exc, exc.data.get("id"), status=400)
    try:
        kit = await _toolkit(request, principal, stream.slug, stream.project)
        await stream.receive(request.app.ctx.rt, principal, kit, msg)
    except ApplianceError as exc:
        return error_response(exc, msg.id)
    return response.text("Accepted", status=202)
