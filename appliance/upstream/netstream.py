"""The sockets under the egress client: httpcore's HTTP/1.1 on plain asyncio transports.

Why: httpcore's default network backend goes through anyio, which wraps every read and
write in a cancel scope and a stream object of its own, and answers httpcore's per-request
"is this kept connection still usable?" question with a ``select`` call. On a call to a
fast upstream those layers were about a fifth of the gateway's CPU. Here one
``asyncio.Protocol`` per connection holds what arrived; reads wait on a future, writes go
straight to the transport, and "readable while idle" (the server closed it, or sent
something unasked) is a look at the buffer.

Nothing here decides where to connect: ``PinnedTransport`` hands httpcore a URL whose host
is already the checked address, and TLS keeps the original name for SNI and verification.
Errors are httpcore's own exception types, so httpx maps them as it always did.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
from httpcore import AsyncNetworkBackend, AsyncNetworkStream

# Stop reading from the socket while this much is waiting to be consumed (a slow reader of
# a big answer must not make the process buffer it all); the byte cap is enforced above.
_HIGH_WATER = 256 * 1024
_GATHER_MAX = 64 * 1024  # writes gathered into one send at most


class _Socket(asyncio.Protocol):
    """What arrived on one connection, and who waits for more."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.lost: BaseException | None = None
        self.closed = False
        self._reader: asyncio.Future[None] | None = None
        self._drain: asyncio.Future[None] | None = None
        self._paused_reading = False
        self._paused_writing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _HIGH_WATER and self.transport is not None and not self._paused_reading:
            self._paused_reading = True
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        return False  # close our side too: HTTP/1.1 has no use for a half-open connection

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        self.lost = exc
        self._wake_reader()
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    def pause_writing(self) -> None:
        self._paused_writing = True

    def resume_writing(self) -> None:
        self._paused_writing = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    def _wake_reader(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(None)

    async def read(self, max_bytes: int) -> bytes:
        while not self.buffer:
            if self.eof or self.closed:
                if self.lost is not None:
                    raise httpcore.ReadError(str(self.lost) or "connection lost") from self.lost
                return b""
            self._reader = asyncio.get_running_loop().create_future()
            try:
                await self._reader
            finally:
                self._reader = None
        data = bytes(self.buffer[:max_bytes])
        del self.buffer[:max_bytes]
        if self._paused_reading and len(self.buffer) <= _HIGH_WATER // 2 and self.transport is not None:
            self._paused_reading = False
            self.transport.resume_reading()
        return data

    async def drained(self) -> None:
        while self._paused_writing and not self.closed:
            self._drain = asyncio.get_running_loop().create_future()
            try:
                await self._drain
            finally:
                self._drain = None


class AsyncioStream(AsyncNetworkStream):
    """httpcore's view of one connection.

    Writes are gathered until the end of the current turn of the event loop (or the next
    read, or 64 KiB): httpcore sends a request's head and body as two writes, and on loopback
    each ``send`` syscall carries the receiver's TCP work too, so one send instead of two
    is a measurable part of a call.
    """

    def __init__(self, proto: _Socket) -> None:
        self._proto = proto
        self._pending = bytearray()
        self._flush_soon = False

    def _flush(self) -> None:
        self._flush_soon = False
        if not self._pending:
            return
        data = bytes(self._pending)
        self._pending.clear()
        transport = self._proto.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    # httpcore's interface names these parameters ``timeout``.
    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        self._flush()
        try:
            async with asyncio.timeout(timeout):
                return await self._proto.read(max_bytes)
        except TimeoutError:
            raise httpcore.ReadTimeout("no data within the read timeout") from None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        transport = self._proto.transport
        if transport is None or self._proto.closed or transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        try:
            self._pending += buffer
            if len(self._pending) < _GATHER_MAX:
                if not self._flush_soon:
                    self._flush_soon = True
                    asyncio.get_running_loop().call_soon(self._flush)
                return
            self._flush()
            if self._proto._paused_writing:
                async with asyncio.timeout(timeout):
                    await self._proto.drained()
        except TimeoutError:
            raise httpcore.WriteTimeout("could not send within the write timeout") from None
        except (OSError, RuntimeError) as exc:
            raise httpcore.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        self._flush()
        transport = self._proto.transport
        if transport is not None and not transport.is_closing():
            transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> AsyncNetworkStream:
        self._flush()
        transport = self._proto.transport
        if transport is None:
            raise httpcore.ConnectError("the connection is closed")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                tls = await loop.start_tls(
                    transport, self._proto, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError:
            transport.close()
            raise httpcore.ConnectTimeout("the TLS handshake did not finish in time") from None
        except (OSError, ssl.SSLError, ssl.CertificateError) as exc:
            transport.close()
            raise httpcore.ConnectError(str(exc)) from exc  # the cause says "TLS" to the caller
        if tls is None:
            raise httpcore.ConnectError("the TLS handshake was abandoned")
        self._proto.transport = tls  # the same protocol object keeps receiving, decrypted
        return self

    def get_extra_info(self, info: str) -> Any:
        transport = self._proto.transport
        if info == "is_readable":
            # Asked of an idle kept connection: anything there (EOF, or bytes nobody asked
            # for) means it must not be reused.
            return bool(self._proto.buffer) or self._proto.eof or self._proto.closed
        if transport is None:
            return None
        if info == "ssl_object":
            return transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return transport.get_extra_info("sockname")
        if info == "server_addr":
            return transport.get_extra_info("peername")
        if info == "socket":
            return transport.get_extra_info("socket")
        return None


class AsyncioBackend(AsyncNetworkBackend):
    """TCP connections made by the event loop itself; no anyio in between."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        proto = _Socket()
        try:
            async with asyncio.timeout(timeout):
                transport, _ = await loop.create_connection(
                    lambda: proto,
                    host,
                    port,
                    local_addr=(local_address, 0) if local_address else None,
                )
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"could not connect to {host}:{port} in time") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed: nothing to tune
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for option in socket_options or ():
                sock.setsockopt(*option)
        return AsyncioStream(proto)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[Any] | None = None,
    ) -> AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not an upstream transport")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
