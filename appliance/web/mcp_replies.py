"""How one POST to ``/mcp`` is answered: a JSON body, a one-event SSE stream, or a call's
relayed notifications (progress, logs) and its requests to the client (an approval's
``elicitation/create``) as SSE events ahead of its response.

JSON whenever the client accepts it (SDK 2.x clients reject SSE events over 1 MiB); a
one-event stream only to clients that accept nothing else. In the 2026-07-28 era the HTTP
status of an error follows its JSON-RPC code.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sanic import Request, response
from sanic.response import HTTPResponse

from appliance.errors import (
    ApplianceError,
    HeaderMismatch,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    MissingClientCapability,
    ParseError,
    Unauthorized,
    UnsupportedProtocolVersion,
)
from appliance.protocol.meta import progress_token
from appliance.rpc import jsonrpc, mcp

# 2026-07-28: the HTTP status follows the JSON-RPC error code, so that intermediaries and
# dual-era clients can tell a modern refusal from a legacy server's plain 400/404.
_BAD_REQUEST = (
    ParseError,
    InvalidRequest,
    InvalidParams,
    HeaderMismatch,
    MissingClientCapability,
    UnsupportedProtocolVersion,
)
MODERN_STATUS = {e.rpc_code: 400 for e in _BAD_REQUEST} | {MethodNotFound.rpc_code: 404}
KEEPALIVE_S = 15.0  # a stream waiting for a person's answer writes a comment this often


def json_reply(
    payload: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> HTTPResponse:
    return response.raw(
        jsonrpc.encode(payload), status=status, headers=headers, content_type="application/json"
    )


def rpc_error(exc: ApplianceError, msg_id: Any = None, status: int | None = None) -> HTTPResponse:
    headers = {}
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = 'Bearer realm="toolspoke", error="invalid_token"'
    return json_reply(jsonrpc.error(msg_id, exc), status or exc.http_status, headers)


def wants_sse(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "text/event-stream" in accept and "application/json" not in accept and "*/*" not in accept


def one_reply(
    request: Request, payload: dict[str, Any], headers: dict[str, str], status: int = 200
) -> HTTPResponse:
    if wants_sse(request) and status == 200:
        body = b"event: message\ndata: " + jsonrpc.encode(payload) + b"\n\n"
        return response.raw(
            body,
            headers={**headers, "Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            content_type="text/event-stream",
        )
    return json_reply(payload, status, headers)


def event(payload: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + jsonrpc.encode(payload) + b"\n\n"


class ProgressStream:
    """Relays notifications (progress, logs) during one request as SSE events, ahead of its
    response.

    The stream opens lazily, on the first notification: a call that reports nothing is
    answered exactly as before. Once open, the response goes as the last event whatever its
    size. Note: SDK 2.x clients reject SSE events over 1 MiB, so a very large result on a
    call that streamed progress may not reach such a client; the plain JSON answer (no
    progressToken) has no such limit.
    """

    def __init__(self, request: Request, headers: dict[str, str]) -> None:
        self._request = request
        self._headers = headers
        self._lock = asyncio.Lock()
        self._resp: HTTPResponse | None = None
        self._done = False
        self._keepalive: asyncio.Task[None] | None = None

    async def notify(self, message: dict[str, Any]) -> None:
        async with self._lock:
            if self._done:
                return  # progress after the response is of no use to anyone
            if self._resp is None:
                self._resp = await self._request.respond(
                    headers={**self._headers, "Cache-Control": "no-store", "X-Accel-Buffering": "no"},
                    content_type="text/event-stream",
                )
            await self._resp.send(event(message))

    async def request(self, message: dict[str, Any]) -> None:
        """A request to the client (an ``elicitation/create``): sent like a notification;
        while a person reads it, comments keep the stream (and Sanic's response timeout,
        reset by each write) alive until the response goes."""
        await self.notify(message)
        if self._keepalive is None and not self._done:
            self._keepalive = asyncio.create_task(self._keep_alive())

    async def _keep_alive(self) -> None:
        every = min(KEEPALIVE_S, float(self._request.app.config.RESPONSE_TIMEOUT) / 4)
        while True:
            await asyncio.sleep(every)
            async with self._lock:
                if self._done or self._resp is None:
                    return
                await self._resp.send(b": keep-alive\n\n")

    def _stop_keepalive(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()

    async def abandon(self) -> bool:
        """End an open stream without a response; False when none was opened."""
        self._stop_keepalive()
        async with self._lock:
            self._done = True
            if self._resp is None:
                return False
            await self._resp.eof()
            return True

    async def finish(self, payload: dict[str, Any], status: int = 200) -> HTTPResponse | None:
        """The handler's return value: a plain reply if nothing was streamed, else None."""
        self._stop_keepalive()
        async with self._lock:
            self._done = True
            if self._resp is None:
                return one_reply(self._request, payload, self._headers, status)
            await self._resp.send(event(payload))
            await self._resp.eof()
            return None


def progress_stream(
    request: Request,
    ctx: mcp.CallContext,
    msg: jsonrpc.Message,
    headers: dict[str, str],
    *,
    asks: bool = False,
) -> ProgressStream | None:
    """A stream for this call's relayed progress and logs (and, ``asks``, its requests to the
    client), when it may get some and takes SSE."""
    if msg.kind != "request" or msg.method != "tools/call":
        return None
    if progress_token(msg.params) is None and ctx.log_level is None and not asks:
        return None
    if "text/event-stream" not in request.headers.get("accept", ""):
        return None
    return ProgressStream(request, headers)


async def send(
    request: Request,
    stream: ProgressStream | None,
    reply: dict[str, Any],
    headers: dict[str, str],
    modern_era: bool,
) -> HTTPResponse | None:
    status = 200
    if modern_era and "error" in reply:
        status = MODERN_STATUS.get(reply["error"]["code"], 200)
    if stream is not None:
        return await stream.finish(reply, status)
    return one_reply(request, reply, headers, status)


async def unanswered(
    request: Request, stream: ProgressStream | None, headers: dict[str, str]
) -> HTTPResponse | None:
    """A request the client cancelled gets no JSON-RPC response (cancellation: "SHOULD NOT
    send a response"); its POST still needs an HTTP answer, so an event stream that ends
    without one (or, to a client that takes no SSE, an empty 202)."""
    if stream is not None and await stream.abandon():
        return None
    if "text/event-stream" in request.headers.get("accept", ""):
        return response.raw(
            b"", headers={**headers, "Cache-Control": "no-store"}, content_type="text/event-stream"
        )
    return response.empty(status=202, headers=headers)
