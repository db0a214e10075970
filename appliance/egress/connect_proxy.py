"""The sandboxed stdio servers' one way out: an HTTP CONNECT proxy on a unix socket.

A sandboxed server has a network namespace of its own, holding only its loopback. A
toolkit that declares hosts (``--allow-host``) gets this proxy's socket bound into its
sandbox, and a forwarder in there (``children/forwarder.py``) offers it on 127.0.0.1 as
``HTTPS_PROXY``. Each ``CONNECT host:port`` is admitted only when the host matches the
toolkit's allow-list AND the egress guard admits every address the name resolves to (the
SSRF rules and ``ALLOWED_TOOL_CIDRS``, the same ``EgressPolicy.resolve`` as every other
outbound call); the tunnel then goes to an address the guard checked, never to a name
resolved again, so DNS cannot rebind it. Only CONNECT is spoken: plain-HTTP proxying
would mean parsing and forwarding whole requests, and every registry speaks TLS.

The request head is read with a byte bound and split linearly; connections are bounded
per server; a tunnel that carries nothing for ``idle_s`` is closed. A refusal is logged
with the host, the port and the reason, never a byte of payload. With an upstream proxy
configured (a site that reaches the internet only through one), the tunnel is asked of
it, for the checked address.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from appliance.egress.guard import Address, EgressPolicy
from appliance.errors import ImportFailed, UpstreamError

log = logging.getLogger(__name__)

HEAD_MAX = 8192  # the CONNECT line and its headers; more is refused
MAX_PATTERNS = 64
DEFAULT_PORT = 443  # a pattern without a port: TLS
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_NAME = re.compile(rf"(?:\*\.)?{_LABEL}(?:\.{_LABEL})*")
_AUTHORITY = re.compile(r"(?:\[[0-9a-f:.]+\]|[a-z0-9.-]+):[0-9]{1,5}")
_HEAD_TIMEOUT_S = 10.0
_CHUNK = 65536
_REFUSALS_KEPT = 5


@dataclass(frozen=True)
class HostPattern:
    """``host``, ``*.domain`` (its subdomains, not itself) or an IP address, with a port."""

    host: str
    port: int

    def matches(self, host: str, port: int) -> bool:
        if port != self.port:
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:]) and len(host) > len(self.host) - 1
        return host == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_pattern(text: str, *, field: str = "allow_hosts") -> HostPattern:
    """One allow-list entry (``host``, ``host:port``, ``*.domain``, ``[v6]:port``); else ImportFailed."""
    raw = text.strip().lower().rstrip(".")
    host, port = _split_authority(raw)
    if host is None or port is None:
        raise ImportFailed(
            f"{text[:100]!r} is not a host pattern (host, host:port, *.domain or an IP address)", field=field
        )
    return HostPattern(host, port)


def parse_patterns(texts: Sequence[str], *, field: str = "allow_hosts") -> tuple[HostPattern, ...]:
    if len(texts) > MAX_PATTERNS:
        raise ImportFailed(f"at most {MAX_PATTERNS} allowed hosts", field=field)
    return tuple(dict.fromkeys(parse_pattern(t, field=field) for t in texts))


def _split_authority(raw: str) -> tuple[str | None, int | None]:
    """(host, port) of ``host[:port]`` / ``[v6][:port]`` / a bare IP, or Nones when malformed."""
    if len(raw) > 260:
        return None, None
    port_text = ""
    if raw.startswith("["):
        host, sep, rest = raw[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None, None
        port_text = rest[1:]
    elif raw.count(":") > 1:
        host = raw  # a bare IPv6 address
    else:
        host, _, port_text = raw.partition(":")
    port: int | None = DEFAULT_PORT
    if port_text:
        port = int(port_text) if port_text.isdigit() and len(port_text) <= 5 else None
        if port is not None and not 0 < port < 65536:
            port = None
    try:
        host = str(ipaddress.ip_address(host))
    except ValueError:
        if not _NAME.fullmatch(host) or len(host) > 253:
            return None, port
    return host, port


@dataclass
class _Served:
    """One server's proxy: its unix socket, its allow-list, its open tunnels."""

    owner: str
    patterns: tuple[HostPattern, ...]
    server: asyncio.AbstractServer | None = None
    path: Path | None = None
    active: int = 0
    refused: list[str] = field(default_factory=list)  # the last few refusals, for errors

    def allows(self, host: str, port: int) -> bool:
        return any(p.matches(host, port) for p in self.patterns)


class ProxyHandle:
    """A running proxy for one sandboxed server; ``aclose`` stops it and removes its socket."""

    def __init__(self, served: _Served, tasks: set[asyncio.Task[None]]) -> None:
        self._served = served
        self._tasks = tasks

    @property
    def path(self) -> Path:
        assert self._served.path is not None
        return self._served.path

    @property
    def refused(self) -> list[str]:
        """The latest refusals (host:port: why), oldest first: what an install's error names."""
        return list(self._served.refused)

    async def aclose(self) -> None:
        server = self._served.server
        if server is not None:
            server.close()
            self._served.server = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._served.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self._served.path.unlink()


class ConnectProxy:
    """Builds the per-server proxies; one per gateway, over the gateway's egress policy."""

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        max_connections: int = 16,
        idle_s: float = 120.0,
        connect_timeout_s: float = 10.0,
        upstream: str = "",
    ) -> None:
        self.policy = policy
        self.max_connections = max_connections
        self.idle_s = idle_s
        self.connect_timeout_s = connect_timeout_s
        self.upstream = _upstream_of(upstream) if upstream else None

    async def serve(
        self, owner: str, patterns: Sequence[str | HostPattern], path: Path, *, uid: int | None = None
    ) -> ProxyHandle:
        """Listen on ``path`` (made 0600, ``uid``'s when given) for ``owner``'s sandbox."""
        parsed = tuple(p if isinstance(p, HostPattern) else parse_pattern(p) for p in patterns)
        served = _Served(owner, parsed)
        tasks: set[asyncio.Task[None]] = set()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            if task is not None:
                tasks.add(task)
            try:
                await self._handle(served, reader, writer)
            except asyncio.CancelledError:
                # Stopped by ``aclose``: this task is the top of its own work, and asyncio's
                # stream server would report a cancelled one as an error.
                await _close(writer)
            finally:
                if task is not None:
                    tasks.discard(task)

        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a socket left by a gateway that was killed
        served.server = await asyncio.start_unix_server(handle, path=str(path), limit=HEAD_MAX)
        served.path = path
        os.chmod(path, 0o600)
        if uid is not None:
            os.chown(path, uid, uid)
        return ProxyHandle(served, tasks)

    async def _handle(
        self, served: _Served, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if served.active >= self.max_connections:
            self._refuse(served, writer, "?", 0, f"over {self.max_connections} connections", 503)
            await _close(writer)
            return
        served.active += 1
        try:
            await self._tunnel(served, reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # the sandbox side went away, or sent a bad head (answered where it could be)
        finally:
            served.active -= 1
            await _close(writer)

    async def _tunnel(
        self, served: _Served, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            async with asyncio.timeout(_HEAD_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
        except (TimeoutError, asyncio.LimitOverrunError, asyncio.IncompleteReadError):
            self._refuse(served, writer, "?", 0, "no complete request head", 400)
            return
        method, host, port = _request_line(head)
        if method != "CONNECT" or host is None or port is None:
            self._refuse(served, writer, host or "?", port or 0, "only CONNECT host:port is served", 405)
            return
        if not served.allows(host, port):
            self._refuse(served, writer, host, port, "not in the toolkit's allowed hosts", 403)
            return
        try:
            up_reader, up_writer = await self._open(host, port)
        except UpstreamError as exc:
            self._refuse(served, writer, host, port, exc.public_message, 403 if _blocked(exc) else 502)
            return
        try:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await self._pipe(reader, writer, up_reader, up_writer)
        finally:
            await _close(up_writer)

    async def _open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        addresses = await self.policy.resolve(host, port)  # UpstreamError: refused or no answer
        last = ""
        for address in addresses:
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    return await self._connect(address, port)
            except (OSError, TimeoutError) as exc:
                last = getattr(exc, "strerror", None) or type(exc).__name__
        raise UpstreamError(f"{host}:{port} could not be reached ({last})", reason="upstream_unavailable")

    async def _connect(
        self, address: Address, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.upstream is None:
            return await asyncio.open_connection(str(address), port, limit=HEAD_MAX)
        # Asked of the operator's proxy for the checked address, so it cannot resolve anew.
        reader, writer = await asyncio.open_connection(*self.upstream, limit=HEAD_MAX)
        target = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
        writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode("ascii"))
        await writer.drain()
        answer = await reader.readuntil(b"\r\n\r\n")
        status = answer.split(b" ", 2)[1:2]
        if status != [b"200"]:
            await _close(writer)
            raise OSError(0, f"the upstream proxy answered {answer[:40]!r}")
        return reader, writer

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        last = [time.monotonic()]

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while True:
                try:
                    async with asyncio.timeout(self.idle_s):
                        data = await src.read(_CHUNK)
                except TimeoutError:
                    if time.monotonic() - last[0] >= self.idle_s:
                        return  # neither way carried anything for idle_s
                    continue
                if not data:
                    return
                last[0] = time.monotonic()
                dst.write(data)
                await dst.drain()

        tasks = [
            asyncio.ensure_future(copy(reader, up_writer)),
            asyncio.ensure_future(copy(up_reader, writer)),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _refuse(
        self, served: _Served, writer: asyncio.StreamWriter, host: str, port: int, why: str, status: int
    ) -> None:
        log.warning("stdio %s: egress refused for %r port %d: %s", served.owner, host[:260], port, why)
        served.refused = [*served.refused[-(_REFUSALS_KEPT - 1) :], f"{host[:260]}:{port}: {why}"]
        text = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed", 502: "Bad Gateway"}
        reason = text.get(status, "Service Unavailable")
        body = f"toolspoke egress: {why}\n".encode("utf-8", "replace")[:500]
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("ascii")
            + body
        )


def _request_line(head: bytes) -> tuple[str, str | None, int | None]:
    """(method, host, port) of ``CONNECT authority HTTP/1.x``; Nones for what is malformed."""
    line = head.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return "", None, None
    try:
        method, authority = parts[0].decode("ascii"), parts[1].decode("ascii").lower()
    except UnicodeDecodeError:
        return "", None, None
    if not _AUTHORITY.fullmatch(authority):
        return method, None, None  # CONNECT names host and port (and never a wildcard)
    return (method, *_split_authority(authority))


def _blocked(exc: UpstreamError) -> bool:
    return exc.reason == "ssrf_blocked"


def _upstream_of(url: str) -> tuple[str, int]:
    parsed = httpx.URL(url)
    return parsed.host, parsed.port or (443 if parsed.scheme == "https" else 80)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError, asyncio.CancelledError):
        await writer.wait_closed()
