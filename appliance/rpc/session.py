"""The MCP session every face shares: the era of each request, and a 2025-era conversation.

A 2026-07-28 request stands alone: ``modern_context`` builds its call from its own envelope.
A 2025-era conversation is a ``Session``: the version ``initialize`` negotiated, the client's
info and capabilities, the log level ``logging/setLevel`` chose, the requests still
running, so that ``notifications/cancelled`` can stop one, and the requests the server sent
the client (``elicitation/create``, to ask for an approval in band) waiting for its answer.
A face hands a request's channel to ``context`` (stdio's lines, a legacy stream's events, a
POST's SSE response) and every client message that is not a request to ``notice``, which
resolves the waiting ask: sending, numbering, matching and the bounded wait live here.
Streamable HTTP keeps its sessions in a ``SessionStore`` under ``Mcp-Session-Id``; a legacy
SSE stream and a stdio process each are one session. The faces only move bytes; what a message means for the
conversation is decided here.

A session holds no identity. Who is calling always comes from the request's own credential,
checked on every request; a session is bound to the key that opened it, so a stolen session
id is useless without that key (and answers 404, exactly like an unknown id).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from appliance.errors import ApplianceError, InvalidRequest
from appliance.gateway.runtime import Runtime
from appliance.models import Principal, Toolkit
from appliance.protocol import elicitation, versions
from appliance.protocol.log_levels import DEFAULT_LEVEL
from appliance.protocol.meta import PROTOCOL_VERSION_KEY
from appliance.rpc import jsonrpc, mcp, modern

Notify = Callable[[dict[str, Any]], Awaitable[None]]
CANCEL_SEND_S = 1.0  # an ask that timed out tells the client so, if it can within this


def is_modern(msg: jsonrpc.Message, version_header: str | None = None) -> bool:
    """The era of one request, for every face (``version_header``: HTTP's
    ``MCP-Protocol-Version``; None elsewhere)."""
    return versions.is_modern(PROTOCOL_VERSION_KEY in msg.meta, msg.method, version_header)


def modern_context(
    principal: Principal,
    msg: jsonrpc.Message,
    *,
    headers: Mapping[str, list[str]] | None = None,
    toolkit: Toolkit | None = None,
    notify: Notify | None = None,
) -> mcp.CallContext:
    """The call of a 2026-07-28 request, from its envelope (raises the first rule it breaks;
    ``headers``: HTTP's routing headers, lower-case names to every value; None elsewhere)."""
    envelope = modern.check_envelope(msg, headers)
    return mcp.CallContext(
        principal,
        envelope.protocol_version,
        modern=True,
        toolkit=toolkit,
        notify=notify,
        log_level=envelope.log_level,
        client_capabilities=envelope.client_capabilities,
    )


def _request_id(value: Any) -> bool:
    """Only a valid id names a request (a dict is not even hashable, and ``True == 1``)."""
    return type(value) in (str, int)


@dataclass(eq=False)
class Session:
    """One 2025-era conversation, bound to the key prefix that opened it.

    ``speaks_modern``: whether the face also serves 2026-07-28 requests (legacy SSE does not:
    that revision defines no SSE transport), which changes what a request before the
    handshake is told.
    """

    key_prefix: str
    scope: str = ""  # "" for the bridge, "<project>.<slug>" for /mcp/<slug>
    speaks_modern: bool = True
    id: str = field(default_factory=lambda: secrets.token_urlsafe(32))  # visible ASCII, unguessable
    protocol_version: str | None = None  # negotiated by initialize (None: no handshake yet)
    client_info: dict[str, Any] = field(default_factory=dict)
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    initialized: bool = False  # the client sent notifications/initialized
    # The least severe relayed notifications/message: everything until logging/setLevel.
    log_level: str = DEFAULT_LEVEL
    # Requests still running, by JSON-RPC id, so that notifications/cancelled can stop one.
    in_flight: dict[Any, asyncio.Future[Any]] = field(default_factory=dict)
    last_seen: float = field(default_factory=time.monotonic)
    # Requests sent to the client (elicitation/create), by their id, awaiting its response.
    asked: dict[str, asyncio.Future[dict[str, Any] | None]] = field(default_factory=dict)
    _asks: int = 0
    # The initialize being answered: a request behind it on an ordered channel waits for it.
    _handshake: asyncio.Future[Any] | None = field(default=None, repr=False)

    # -- the handshake -------------------------------------------------------------------

    async def initialize(
        self, rt: Runtime, principal: Principal, msg: jsonrpc.Message, toolkit: Toolkit | None = None
    ) -> dict[str, Any]:
        """Answer ``initialize``; a successful answer (re)negotiates this session."""
        ctx = mcp.CallContext(principal, versions.LATEST_LEGACY, toolkit=toolkit)
        reply = await mcp.respond(rt, ctx, msg)
        if "result" in reply:
            self.protocol_version = reply["result"]["protocolVersion"]
            client, capabilities = msg.params.get("clientInfo"), msg.params.get("capabilities")
            self.client_info = client if isinstance(client, dict) else {}
            self.client_capabilities = capabilities if isinstance(capabilities, dict) else {}
        return reply

    def handshake_running(self, work: asyncio.Future[Any]) -> None:
        """``work`` answers the first initialize: requests behind it wait (``settled``)."""
        if self.protocol_version is None:
            self._handshake = work

    async def settled(self) -> None:
        """Once the first initialize, if one is running, has its answer (whatever it was)."""
        pending = self._handshake
        if self.protocol_version is None and pending is not None and not pending.done():
            await asyncio.wait({pending})  # never raises, whatever became of it

    def refusal(self, msg: jsonrpc.Message) -> InvalidRequest | None:
        """What a request gets before the handshake (None: it may be served). ``ping`` always
        may; where 2026-07-28 is spoken too, so may ``server/discover``, which the method
        table answers for the era the request is in."""
        if self.protocol_version is not None or msg.method == "ping":
            return None
        if not self.speaks_modern:
            # SDK 2.x clients probe server/discover first; any error sends them to initialize.
            return InvalidRequest(
                "send initialize first: this transport speaks the handshake era", field="method"
            )
        if msg.method == "server/discover":
            return None
        return InvalidRequest("send initialize (or a 2026-07-28 request) first", field="method")

    # -- requests ------------------------------------------------------------------------

    def context(
        self, principal: Principal, toolkit: Toolkit | None = None, notify: Notify | None = None
    ) -> mcp.CallContext:
        """The call of a request in this session (before the handshake: the newest version);
        ``notify``: the request's channel to the client, for notifications and asks."""
        ctx = mcp.CallContext(
            principal,
            self.protocol_version or versions.LATEST_LEGACY,
            toolkit=toolkit,
            notify=notify,
            log_level=self.log_level,
            elicit=self.asker(notify),
            asks_urls=elicitation.asks_urls(self.client_capabilities),
        )
        ctx.set_log_level = self.set_log_level
        return ctx

    async def answer(
        self,
        rt: Runtime,
        principal: Principal,
        msg: jsonrpc.Message,
        *,
        toolkit: Toolkit | None = None,
        notify: Notify | None = None,
    ) -> dict[str, Any]:
        """The JSON-RPC response to one request on a channel this session is (legacy SSE,
        stdio): a 2026-07-28 request on its own envelope where that era is spoken, the
        handshake, or a request of the conversation. Never raises an ApplianceError."""
        try:
            if self.speaks_modern and is_modern(msg):
                return await mcp.respond(
                    rt, modern_context(principal, msg, toolkit=toolkit, notify=notify), msg
                )
            if msg.method == "initialize":
                return await self.initialize(rt, principal, msg, toolkit)
            await self.settled()
            refused = self.refusal(msg)
            if refused is not None:
                raise refused
            return await mcp.respond(rt, self.context(principal, toolkit, notify), msg)
        except ApplianceError as exc:
            return jsonrpc.error(msg.id, exc)

    def set_log_level(self, level: str) -> None:
        self.log_level = level

    # -- requests to the client ----------------------------------------------------------

    def elicits(self) -> bool:
        """Whether the client declared form-mode elicitation at initialize."""
        return elicitation.asks_forms(self.client_capabilities)

    def asker(self, send: Notify | None) -> mcp.Elicit | None:
        """How a call on the channel ``send`` asks the client's user (None: it cannot)."""
        if send is None or not self.elicits():
            return None

        async def elicit(params: dict[str, Any], wait_s: float) -> dict[str, Any] | None:
            return await self.ask(send, elicitation.METHOD, params, wait_s)

        return elicit

    async def ask(
        self, send: Notify, method: str, params: dict[str, Any], wait_s: float
    ) -> dict[str, Any] | None:
        """Send the client a request on ``send`` and wait (at most ``wait_s``) for its result:
        None for an error, no answer in time, or a channel that could not carry it. A cancelled
        caller stops waiting; its late answer is dropped as unknown."""
        self._asks += 1
        request_id = f"toolspoke-{self._asks}"
        answer: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        self.asked[request_id] = answer
        try:
            try:
                await send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            except Exception:  # noqa: BLE001 - the channel is gone: nobody to ask
                return None
            try:
                async with asyncio.timeout(wait_s):
                    return await answer
            except TimeoutError:
                await self._withdraw(send, request_id)
                return None
        finally:
            self.asked.pop(request_id, None)

    @staticmethod
    async def _withdraw(send: Notify, request_id: str) -> None:
        """Tell the client an ask is no longer wanted (best effort, briefly)."""
        note = {"requestId": request_id, "reason": "no answer in time"}
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CANCEL_SEND_S):
                await send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": note})

    def answered(self, msg: jsonrpc.Message) -> None:
        """A response from the client: the result of the ask it answers (unknown ids, and
        answers that come too late, are dropped)."""
        answer = self.asked.get(msg.id) if isinstance(msg.id, str) else None
        if answer is None or answer.done():
            return
        result = msg.raw.get("result")
        answer.set_result(result if isinstance(result, dict) else None)

    # -- calls in flight -----------------------------------------------------------------

    def running(self, request_id: Any) -> bool:
        return _request_id(request_id) and request_id in self.in_flight

    def track(self, request_id: Any, work: asyncio.Future[Any]) -> None:
        """Keep ``work`` under its request id until it ends, so that it can be cancelled."""
        self.in_flight[request_id] = work

        def forget(done: asyncio.Future[Any]) -> None:
            if self.in_flight.get(request_id) is done:  # not a later request under the same id
                del self.in_flight[request_id]

        work.add_done_callback(forget)

    def cancel(self, request_id: Any) -> None:
        """Stop the request ``request_id`` if it still runs (unknown ids are ignored)."""
        if _request_id(request_id):
            work = self.in_flight.get(request_id)
            if work is not None:
                work.cancel()

    def cancel_all(self) -> None:
        for work in list(self.in_flight.values()):
            work.cancel()

    async def drain(self) -> None:
        """Until every request running now has ended."""
        running = list(self.in_flight.values())
        if running:
            await asyncio.gather(*running, return_exceptions=True)

    def notice(self, msg: jsonrpc.Message) -> None:
        """A message from the client that is not a request: the answer to an ask, the end of
        the handshake, or a cancellation (no reply follows, as the cancellation spec says).
        Others mean nothing here."""
        if msg.kind == "response":
            self.answered(msg)
        elif msg.method == "notifications/initialized":
            self.initialized = True
        elif msg.method == "notifications/cancelled":
            self.cancel(msg.params.get("requestId"))


class SessionStore:
    """Streamable HTTP's sessions by id: idle expiry, a cap in total and per key (LRU)."""

    def __init__(
        self,
        ttl_s: float,
        max_sessions: int,
        clock: Callable[[], float] = time.monotonic,
        *,
        per_key: int = 0,
    ):
        self._ttl = ttl_s
        self._max = max_sessions
        # One key's flood of initialize must not push out everyone else's sessions (RATE-05):
        # beyond ``per_key`` (0: no cap), a key's own least recently used session goes.
        self._per_key = per_key
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._held: Counter[str] = Counter()  # sessions per key prefix

    def create(
        self, key_prefix: str, protocol_version: str, client_info: dict[str, Any], scope: str = ""
    ) -> Session:
        return self.add(
            Session(key_prefix, scope, protocol_version=protocol_version, client_info=client_info)
        )

    def add(self, session: Session) -> Session:
        """Keep a session that has completed its handshake, under its id."""
        self._expire()
        session.last_seen = self._clock()
        key_prefix = session.key_prefix
        if self._per_key and self._held[key_prefix] >= self._per_key:
            oldest = next(sid for sid, held in self._sessions.items() if held.key_prefix == key_prefix)
            self._drop(oldest)
        self._sessions[session.id] = session
        self._held[key_prefix] += 1
        while len(self._sessions) > self._max:
            self._drop(next(iter(self._sessions)))
        return session

    def get(self, session_id: str, key_prefix: str, scope: str = "") -> Session | None:
        session = self._sessions.get(session_id)
        # A session belongs to one key and one endpoint; anything else looks like no session.
        if session is None or session.key_prefix != key_prefix or session.scope != scope:
            return None
        now = self._clock()
        if now - session.last_seen > self._ttl:
            self._drop(session_id)
            return None
        session.last_seen = now
        self._sessions.move_to_end(session_id)
        return session

    def delete(self, session_id: str, key_prefix: str, scope: str = "") -> bool:
        if self.get(session_id, key_prefix, scope) is None:
            return False
        self._drop(session_id)
        return True

    def _drop(self, session_id: str) -> None:
        session = self._sessions.pop(session_id)
        self._held[session.key_prefix] -= 1
        if not self._held[session.key_prefix]:
            del self._held[session.key_prefix]

    def _expire(self) -> None:
        now = self._clock()
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if now - oldest.last_seen <= self._ttl:
                break
            self._drop(oldest.id)

    def __len__(self) -> int:
        return len(self._sessions)
