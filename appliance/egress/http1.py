"""HTTP/1.1 on kept-alive connections to one checked address: the wire under the egress client.

Why our own and not httpcore's pool: on a call to a fast upstream, httpcore and h11 were a
third of the gateway's CPU, and their cost grew with concurrency (the pool examines every
kept connection and every queued request on each request and release; h11 parses event by
event). This module does only what ``PinnedTransport`` needs, in a few buffer operations:

- a request leaves in one ``send`` (head and body together);
- a response head is split out of one buffer; the body is framed by Content-Length,
  chunked encoding, or the end of the connection, as RFC 9112 section 6.3 orders them;
- idle connections are kept last-in first-out, so a busy route reuses its warmest
  connection and the others age out after ``expiry_s`` (a timer closes them).

Not here: where to connect (``PinnedTransport`` has resolved and checked the address),
the total deadline of a call (``Egress``), and content decoding (transport.py's bounded
decoder). Errors are httpx's exception types, so ``Egress`` maps them as for any transport.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, cast

import httpx

# Stop reading from the socket while this much waits to be consumed: a slow reader of a big
# answer must not make the process buffer all of it (the byte cap is enforced above us).
_HIGH_WATER = 256 * 1024
_MAX_HEAD = 64 * 1024  # status line and headers of one response
_MAX_LINE = 4096  # one chunk-size or trailer line
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_NO_BODY_STATUS = frozenset({204, 304})


class _Wire(asyncio.Protocol):
    """What arrived on one connection, and the one reader waiting for more."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.lost: BaseException | None = None
        self.closed = False
        self._waiter: asyncio.Future[None] | None = None
        self._drain: asyncio.Future[None] | None = None
        self._paused_reading = False
        self.paused_writing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A cast, not an isinstance check: uvloop's transports do not subclass asyncio's.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _HIGH_WATER and self.transport is not None and not self._paused_reading:
            self._paused_reading = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # close our side too: HTTP/1.1 has no use for a half-open connection

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        self.lost = exc
        self._wake()
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    def pause_writing(self) -> None:
        self.paused_writing = True

    def resume_writing(self) -> None:
        self.paused_writing = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def consumed(self) -> None:
        """The reader took bytes out of ``buffer``: resume the socket once it has room."""
        if self._paused_reading and len(self.buffer) <= _HIGH_WATER // 2 and self.transport is not None:
            self._paused_reading = False
            self.transport.resume_reading()

    async def more(self) -> bool:
        """Wait for bytes beyond those in ``buffer``; False at the end of the stream."""
        if self.eof or self.closed:
            if self.lost is not None:
                raise httpx.ReadError(str(self.lost) or "the connection was lost")
            return False
        self.consumed()
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self.lost is not None:
            raise httpx.ReadError(str(self.lost) or "the connection was lost")
        return True

    async def drained(self) -> None:
        while self.paused_writing and not self.closed:
            self._drain = asyncio.get_running_loop().create_future()
            try:
                await self._drain
            finally:
                self._drain = None


class Connection:
    """One TCP (or TLS) connection, carrying one exchange at a time."""

    __slots__ = ("idle_since", "reusable", "wire")

    def __init__(self, wire: _Wire) -> None:
        self.wire = wire
        self.idle_since = 0.0
        self.reusable = False

    def usable(self) -> bool:
        """Nothing may be waiting on an idle connection: bytes or EOF mean the server moved on."""
        wire = self.wire
        return not (wire.closed or wire.eof or wire.buffer) and not (
            wire.transport is None or wire.transport.is_closing()
        )

    def close(self) -> None:
        self.reusable = False
        transport = self.wire.transport
        if transport is not None and not transport.is_closing():
            transport.close()

    async def send(self, method: str, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        head = request_head(method, target, headers, len(body))
        transport = self.wire.transport
        if transport is None or self.wire.closed or transport.is_closing():
            raise httpx.WriteError("the connection is closed")
        try:
            transport.write(head + body if len(body) < 65536 else head)
            if len(body) >= 65536:
                transport.write(body)
        except (OSError, RuntimeError) as exc:
            raise httpx.WriteError(str(exc)) from exc
        if self.wire.paused_writing:
            await self.wire.drained()

    async def receive(self, method: bytes) -> tuple[int, bytes, list[tuple[bytes, bytes]], str, int]:
        """The final response's status, reason and headers, how its body is framed, its length.

        Framing is ``none``, ``length`` (exactly the length), ``chunked`` or ``close`` (to the
        end of the connection).
        """
        while True:
            status, reason, headers, http10 = await self._head()
            if 100 <= status < 200 and status != 101:
                continue  # an interim answer (100 Continue, 103 Early Hints): the real one follows
            break
        close = http10
        chunked = False
        length = 0
        te: list[bytes] = []
        lengths: set[bytes] = set()
        for name, value in headers:
            lower = name.lower()
            if lower == b"connection" and b"close" in value.lower():
                close = True
            elif lower == b"transfer-encoding":
                te += [v.strip().lower() for v in value.split(b",")]
            elif lower == b"content-length":
                lengths.update(v.strip() for v in value.split(b","))
        if status == 101:
            framing, close = "none", True  # another protocol from here on: never reused
        elif method == b"HEAD" or status in _NO_BODY_STATUS:
            framing = "none"
        elif te:
            # RFC 9112 6.3: chunked last frames the body; otherwise it runs to the close.
            # Together with a Content-Length it is a smuggling signal: never reuse.
            chunked = te[-1] == b"chunked"
            framing = "chunked" if chunked else "close"
            close = close or bool(lengths) or not chunked
        elif lengths:
            if len(lengths) != 1 or not next(iter(lengths)).isdigit():
                raise httpx.RemoteProtocolError("the upstream sent an invalid Content-Length")
            length = int(next(iter(lengths)))
            framing = "length"
        else:
            framing = "close"
            close = True
        self.reusable = not close
        return status, reason, headers, framing, length or 0

    async def _head(self) -> tuple[int, bytes, list[tuple[bytes, bytes]], bool]:
        wire = self.wire
        start = 0
        while True:
            end = wire.buffer.find(b"\r\n\r\n", start)
            if end >= 0:
                break
            if len(wire.buffer) > _MAX_HEAD:
                raise httpx.RemoteProtocolError("the upstream's response head is too large")
            start = max(0, len(wire.buffer) - 3)
            if not await wire.more():
                raise httpx.RemoteProtocolError(
                    "the upstream closed the connection without sending a response"
                    if not wire.buffer
                    else "the upstream closed the connection in the middle of a response head"
                )
        if end > _MAX_HEAD:
            raise httpx.RemoteProtocolError("the upstream's response head is too large")
        lines = bytes(wire.buffer[:end]).split(b"\r\n")
        del wire.buffer[: end + 4]
        version, _, rest = lines[0].partition(b" ")
        code, _, reason = rest.partition(b" ")
        if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
            raise httpx.RemoteProtocolError("the upstream's status line is not HTTP/1.x")
        headers: list[tuple[bytes, bytes]] = []
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not _TOKEN.fullmatch(name):
                raise httpx.RemoteProtocolError("the upstream sent a malformed header line")
            headers.append((name, value.strip(b" \t")))
        return int(code), reason, headers, version == b"HTTP/1.0"

    async def body(self, framing: str, length: int) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive, framed as ``receive`` found."""
        wire = self.wire
        if framing == "none":
            return
        if framing == "length":
            async for piece in self._exactly(length):
                yield piece
            if wire.buffer:
                self.reusable = False  # more than it announced: do not trust the framing
            return
        if framing == "close":
            while True:
                if wire.buffer:
                    piece = bytes(wire.buffer)
                    wire.buffer.clear()
                    wire.consumed()
                    yield piece
                elif not await wire.more():
                    return
        async for piece in self._chunks():
            yield piece

    async def _chunks(self) -> AsyncIterator[bytes]:
        wire = self.wire
        while True:
            line = await self._line()
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16) if size_text and _is_hex(size_text) else -1
            except ValueError:
                size = -1
            if size < 0:
                raise httpx.RemoteProtocolError("the upstream sent an invalid chunk size")
            if size == 0:
                while await self._line():  # trailers, ignored
                    pass
                if wire.buffer:
                    self.reusable = False
                return
            async for piece in self._exactly(size):
                yield piece
            if await self._line():
                raise httpx.RemoteProtocolError("the upstream sent a chunk longer than announced")

    async def _exactly(self, size: int) -> AsyncIterator[bytes]:
        """``size`` bytes of body as they arrive; the end of the stream before them is an error."""
        wire = self.wire
        while size:
            if not wire.buffer:
                if not await wire.more():
                    raise httpx.RemoteProtocolError("the upstream closed the connection mid-body")
                continue
            piece = bytes(wire.buffer[:size])
            del wire.buffer[: len(piece)]
            size -= len(piece)
            wire.consumed()
            yield piece

    async def _line(self) -> bytes:
        wire = self.wire
        while True:
            end = wire.buffer.find(b"\r\n", 0, _MAX_LINE)
            if end >= 0:
                line = bytes(wire.buffer[:end])
                del wire.buffer[: end + 2]
                return line
            if len(wire.buffer) >= _MAX_LINE:
                raise httpx.RemoteProtocolError("the upstream sent an over-long chunk line")
            if not await wire.more():
                raise httpx.RemoteProtocolError("the upstream closed the connection mid-chunk")


def _is_hex(text: bytes) -> bool:
    return all(c in b"0123456789abcdefABCDEF" for c in text)


def request_head(method: str, target: bytes, headers: list[tuple[bytes, bytes]], body_length: int) -> bytes:
    """The request line and headers; refuses what would split or smuggle a request."""
    lines = [b"%s %s HTTP/1.1" % (method.encode("ascii"), target)]
    has_length = False
    for name, value in headers:
        if not _TOKEN.fullmatch(name):
            raise httpx.LocalProtocolError(f"invalid header name {name!r}")
        lowered = name.lower()
        if lowered == b"content-length":
            has_length = True
        elif lowered == b"transfer-encoding":
            continue  # the body is always sent whole, with its length
        lines.append(name + b": " + value)
    if not has_length and (body_length or method not in ("GET", "HEAD", "DELETE", "OPTIONS")):
        lines.append(b"Content-Length: %d" % body_length)
    head = b"\r\n".join(lines)
    if b"\0" in head or head.count(b"\n") != len(lines) - 1 or head.count(b"\r") != len(lines) - 1:
        raise httpx.LocalProtocolError("a header value contains a line break or NUL")
    return head + b"\r\n\r\n"


class Pool:
    """Connections to one (scheme, hostname, checked address, port), at most ``max_open``.

    ``keep`` idle connections are kept (last in, first out) for ``expiry_s`` seconds;
    ``spare`` is shared by every pool of the process and bounds the idle ones in total, so
    many routes cannot hold file descriptors without limit.
    """

    def __init__(
        self,
        *,
        address: str,
        port: int,
        tls: ssl.SSLContext | None,
        sni: str,
        keep: int,
        expiry_s: float,
        max_open: int,
        spare: list[int],
    ) -> None:
        self._address, self._port, self._tls, self._sni = address, port, tls, sni
        self._keep, self._expiry, self._max_open, self._spare = keep, expiry_s, max_open, spare
        self._idle: list[Connection] = []
        self._busy = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False

    async def acquire(self, connect_timeout: float | None) -> Connection:
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                raise httpx.ConnectError("the connection pool is closed")
            while self._idle:
                conn = self._idle.pop()
                self._spare[0] += 1
                if conn.usable() and loop.time() - conn.idle_since < self._expiry:
                    self._busy += 1
                    return conn
                conn.close()
            if self._busy < self._max_open:
                self._busy += 1
                try:
                    return await self._connect(connect_timeout)
                except BaseException:
                    self._busy -= 1
                    self._wake_one()
                    raise
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    async def _connect(self, limit_s: float | None) -> Connection:
        loop = asyncio.get_running_loop()
        wire = _Wire()
        try:
            async with asyncio.timeout(limit_s):
                await loop.create_connection(
                    lambda: wire,
                    self._address,
                    self._port,
                    ssl=self._tls,
                    server_hostname=self._sni if self._tls is not None else None,
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"could not connect to {self._sni} in time") from None
        except OSError as exc:  # ssl.SSLError included: the cause tells the caller it was TLS
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        return Connection(wire)

    def release(self, conn: Connection) -> None:
        """Take a connection back after its exchange: kept when it is clean, else closed."""
        self._busy -= 1
        keep = not self._closed and len(self._idle) < self._keep and self._spare[0] > 0
        if keep and conn.reusable and conn.usable():
            loop = asyncio.get_running_loop()
            conn.idle_since = loop.time()
            self._idle.append(conn)
            self._spare[0] -= 1
            if self._sweep is None:
                self._sweep = loop.call_later(self._expiry, self._expire)
            self._wake_one()
            return
        conn.close()
        self._wake_one()

    def _wake_one(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
                return

    def _expire(self) -> None:
        """Close the connections idle past the expiry (the oldest are at the bottom)."""
        self._sweep = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._idle and now - self._idle[0].idle_since >= self._expiry:
            self._idle.pop(0).close()
            self._spare[0] += 1
        if self._idle:
            self._sweep = loop.call_at(self._idle[0].idle_since + self._expiry, self._expire)

    @property
    def busy(self) -> int:
        return self._busy

    def close(self) -> None:
        """Close the idle connections now; busy ones close when they come back."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        while self._idle:
            self._idle.pop().close()
            self._spare[0] += 1
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)


@dataclass(frozen=True)
class Answer:
    """A response whose head is read; ``body`` still has to be read or closed."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: Body

    def header(self, name: bytes) -> str:
        """Every value of the (lower-case) header ``name``, joined with ", "."""
        return ", ".join(v.decode("latin-1") for k, v in self.headers if k.lower() == name)


class Body:
    """A response body that gives its connection back when it is closed (read or not)."""

    def __init__(
        self, conn: Connection, framing: str, length: int, done: Callable[[Connection], Any]
    ) -> None:
        self._conn = conn
        self._framing = framing
        self._length = length
        self._done: Callable[[Connection], Any] | None = done
        self._finished = framing == "none" or (framing == "length" and length == 0)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self._conn.body(self._framing, self._length):
                yield piece
        except BaseException:
            self._conn.close()
            raise
        self._finished = True

    def close(self) -> None:
        done, self._done = self._done, None
        if done is None:
            return
        if not self._finished:
            self._conn.close()  # abandoned mid-body: the rest would confuse the next exchange
        done(self._conn)
