"""Connections `serve` accepts: a deadline for each request head, caps per address and in total.

Why Sanic's own timeouts are not enough: its ``REQUEST_TIMEOUT`` counts from the last byte
received, not from the first byte of the head, so a client that sends its headers a byte a
second never reaches it, and a few hundred such clients (slowloris) hold a few hundred
connections for as long as they like. Here each request head has a deadline of its own,
``request_head_timeout_s``, counted from the connection's opening (for its first request)
or from the head's first byte (for the next ones on a kept-alive connection), whatever
trickles in meanwhile. A head still incomplete then is answered 408 and the connection
closed (one that has sent nothing is simply closed: there is nothing to answer). Sanic's
timeouts still apply as before: silence (``REQUEST_TIMEOUT``), idle keep-alive
(``KEEP_ALIVE_TIMEOUT``) and the handler's time (``RESPONSE_TIMEOUT``).

The deadline bounds how long one connection can be held without asking anything; the caps
bound how many one client can hold: at most ``max_connections_per_address`` open
connections per client address, and ``max_connections`` in all. A connection over either
cap is answered 503 with ``Retry-After`` at once, before any of its bytes are read, and
closed (we stop writing at once and drop it when the client closes, or after
``REFUSAL_LINGER_S``: closing a socket whose request was not read would reset it, and the
client could lose the answer). The address is the TCP peer's: behind a reverse proxy every
connection comes from the proxy, so raise the per-address cap there.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from sanic import Request
from sanic.exceptions import RequestTimeout
from sanic.http import Stage

from appliance.web.shutdown import TrackedProtocol

log = logging.getLogger(__name__)

REFUSAL_LINGER_S = 1.0  # how long a refused connection may stay while its 503 is read
MAX_LINGERING = 256  # refused connections waiting to close; beyond, dropped without an answer


class Admission:
    """How many connections are open, per client address and in total; who may open one more."""

    def __init__(self, *, total: int, per_address: int) -> None:
        self.total = total
        self.per_address = per_address
        self.open = 0
        self.by_address: dict[str, int] = {}
        self.lingering = 0  # refused, answered, not yet closed
        self.refused = 0  # since start (shown in the log line of each refusal's first)

    def admit(self, address: str) -> str | None:
        """Count the connection in and return None, or say why it is refused."""
        held = self.by_address.get(address, 0)
        if held >= self.per_address:
            return (
                f"too many connections from this address (at most {self.per_address} at once, "
                "setting max_connections_per_address); close one or retry shortly"
            )
        if self.open >= self.total:
            return (
                f"the server holds as many connections as it takes ({self.total}, setting "
                "max_connections); retry shortly"
            )
        self.by_address[address] = held + 1
        self.open += 1
        return None

    def leave(self, address: str) -> None:
        self.open -= 1
        left = self.by_address.get(address, 1) - 1
        if left > 0:
            self.by_address[address] = left
        else:
            self.by_address.pop(address, None)


def _refusal(message: str) -> bytes:
    body = orjson.dumps({"error": {"reason": "too_many_connections", "message": message}})
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class GuardedProtocol(TrackedProtocol):
    """Sanic's HTTP protocol (as tracked for shutdown), with the head deadline and the caps."""

    # Sanic's metaclass gives every class empty __slots__: our attributes must be named.
    __slots__ = ("_address", "_admission", "_head_timeout", "_head_timer", "_linger")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request_handler = self._handle  # the head is complete once a handler starts
        self._admission: Admission = self.app.ctx.admission
        self._head_timeout: float = self.app.ctx.settings.request_head_timeout_s
        self._head_timer: asyncio.TimerHandle | None = None
        self._address: str | None = None  # counted in; None: refused (or never admitted)
        self._linger: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol callbacks -----------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        refusal = self._admission.admit(address)
        if refusal is not None:
            self._refuse(transport, refusal)
            return
        self._address = address
        super().connection_made(transport)
        self._arm()  # the first head is due within the deadline of the connection's opening

    def data_received(self, data: bytes) -> None:
        if self._address is None:
            return  # refused: whatever it sends is dropped unread
        super().data_received(data)
        if self._head_timer is None and self._head_pending():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._address is None:
            if self._linger is not None:
                self._linger.cancel()
                self._linger = None
                self._admission.lingering -= 1
            return
        self._admission.leave(self._address)
        self._address = None
        self._disarm()
        super().connection_lost(exc)

    # -- the head deadline ----------------------------------------------------------------

    async def _handle(self, request: Request) -> None:
        self._disarm()
        await self.app.handle_request(request)

    def _head_pending(self) -> bool:
        """Bytes of a request head are arriving (none of a body: a handler reads those)."""
        http = self.http
        if http is None or http.stage is Stage.IDLE:
            return True
        return http.stage is Stage.REQUEST and http.request is None

    def _arm(self) -> None:
        self._head_timer = self.loop.call_later(self._head_timeout, self._head_late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        task = self._task
        if task is None or task.done() or not self._head_pending():
            return
        http = self.http
        if http is not None and http.stage is Stage.REQUEST:
            # As Sanic's own request timeout: the connection task answers this, then closes.
            http.exception = RequestTimeout(
                f"the request head did not arrive within {self._head_timeout:g} s "
                "(setting request_head_timeout_s)"
            )
        task.cancel()  # IDLE (nothing sent yet): closed without an answer

    # -- refusals ---------------------------------------------------------------------------

    def _refuse(self, transport: Any, message: str) -> None:
        adm = self._admission
        adm.refused += 1
        if adm.refused == 1 or adm.refused % 1000 == 0:
            log.warning("connection refused (%d so far): %s", adm.refused, message)
        if adm.lingering >= MAX_LINGERING:
            transport.abort()  # a flood of refusals: no answer, no socket kept
            return
        self.transport = transport
        transport.write(_refusal(message))
        try:
            transport.write_eof()
        except (NotImplementedError, OSError, RuntimeError):
            transport.close()
            return
        adm.lingering += 1
        self._linger = self.loop.call_later(REFUSAL_LINGER_S, transport.abort)
