"""One live MCP session per toolkit, reused across calls, rebuilt after a failure.

A handshake per call would add a round trip (and, for stdio, a process) to every tool
call; so the pool keeps the session a toolkit's first call opened. A session whose
connection failed (``upstream_unavailable``: the child died, the server restarted, the
session expired twice) is dropped, and the *next* call opens a fresh one: the failing call
itself is never retried here, because it may already have acted upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from appliance.children.processes import ProcessRegistry, StdioProcess, StdioSpec
from appliance.egress.auth import UpstreamAuth
from appliance.egress.transport import Egress
from appliance.errors import InvalidParams, UpstreamError
from appliance.mcpclient.http_transport import connect_http, connect_sse
from appliance.mcpclient.listen import listen_task, wants_listen
from appliance.mcpclient.session import McpSession
from appliance.mcpclient.stdio_transport import StdioTransport
from appliance.protocol.relays import LogRelay, ProgressCallback

log = logging.getLogger(__name__)

TRANSPORTS = ("http", "sse", "stdio")
_MAX_BACKOFF_WAIT_S = 2.0


def _cap(connection: dict[str, Any]) -> int | None:
    """The toolkit's response cap in bytes (``max_bytes``; the caller puts it there)."""
    cap = connection.get("max_bytes")
    return cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else None


class McpPool:
    def __init__(
        self,
        egress: Egress,
        processes: ProcessRegistry,
        *,
        stdio_idle_s: float = 600.0,
        stdio_start_timeout_s: float = 60.0,
        client_info: dict[str, Any] | None = None,
    ) -> None:
        self.egress = egress
        self.processes = processes
        self.stdio_idle_s = stdio_idle_s
        self.stdio_start_timeout_s = stdio_start_timeout_s
        self.client_info = client_info
        self._sessions: dict[str, tuple[McpSession, dict[str, Any]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # Called with a pooled session's key when its upstream sends
        # notifications/tools/list_changed (the re-sync scheduler sets it). It must only
        # schedule work: it runs on the session's reader.
        self.on_tools_changed: Callable[[str], None] | None = None
        # 2026-07-28 sessions hear list_changed only on a subscriptions/listen stream: one
        # per pooled session that wants it, ended with the session (``mcp_listen``).
        self._listens: dict[str, asyncio.Task[Any]] = {}
        self._listened: set[str] = set()  # keys that had a listen stream in this process

    def _session_options(self, key: str, pooled: bool) -> dict[str, Any]:
        hook = self.on_tools_changed
        if not pooled or hook is None:
            return {}
        return {"on_tools_changed": lambda: hook(key)}

    async def _open(
        self, key: str, connection: dict[str, Any], timeout_s: float, *, pooled: bool = False
    ) -> McpSession:
        transport = connection.get("transport")
        options = self._session_options(key, pooled)
        # The toolkit's opened vault credential, if any (never part of the stored connection).
        auth = connection.get("auth")
        auth = auth if isinstance(auth, UpstreamAuth) else None
        cap = _cap(connection)
        if transport == "stdio":
            spec = StdioSpec(
                command=str(connection.get("command", "")),
                args=tuple(str(a) for a in connection.get("args") or ()),
                env={str(k): str(v) for k, v in (connection.get("env") or {}).items()},
                cwd=str(connection.get("cwd") or ""),
                idle_timeout_s=self.stdio_idle_s,
                start_timeout_s=self.stdio_start_timeout_s,
                secret_env=dict(auth.env) if auth is not None else {},
                max_line_bytes=cap,
                home=str(connection.get("home") or ""),
                allow_hosts=tuple(str(h) for h in connection.get("allow_hosts") or ()),
            )
            process = await self.processes.put(key, spec)
            await self._wait_out_backoff(process, timeout_s)
            session = McpSession(StdioTransport(process), client_info=self.client_info, **options)
            try:
                # The first answer may wait for npx to install the package.
                await session.connect(timeout_s=max(timeout_s, self.stdio_start_timeout_s))
            except BaseException:
                await session.aclose()
                raise
            return session
        url = str(connection.get("url", ""))
        headers = dict(connection.get("headers") or {})
        if auth is not None:
            headers.update(auth.static_headers())
        # A credential that answers challenges (a person's OAuth tokens, ``HttpAuth``).
        http_auth = connection.get("http_auth")
        if transport == "http" and http_auth is not None:
            return await connect_http(
                self.egress,
                url,
                headers=headers,
                timeout_s=timeout_s,
                client_info=self.client_info,
                session_options=options,
                max_bytes=cap,
                auth=http_auth,
            )
        if transport in ("http", "sse"):
            # http falls back to legacy SSE by itself; "sse" is for URLs known to be legacy.
            connect = connect_http if transport == "http" else connect_sse
            return await connect(
                self.egress,
                url,
                headers=headers,
                timeout_s=timeout_s,
                client_info=self.client_info,
                session_options=options,
                max_bytes=cap,
            )
        raise InvalidParams(
            f"unknown MCP transport {transport!r}; use one of {', '.join(TRANSPORTS)}", field="transport"
        )

    @staticmethod
    async def _wait_out_backoff(process: StdioProcess, timeout_s: float) -> None:
        """After one crash the restart back-off is short: wait it out rather than fail the call.

        A crash loop's back-off grows past ``_MAX_BACKOFF_WAIT_S``; then the call fails at once
        with the retry time, so a broken server cannot hold callers for long. The start is
        tried again after each wait until it spawns: a timer may fire a moment early (uvloop
        keeps time in milliseconds, ``retry_after_s`` is rounded), and a back-off found
        all but over must be waited out, never turned into a refusal ("retry in 0.0s").
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(_MAX_BACKOFF_WAIT_S, timeout_s)
        while True:
            try:
                await process.start()
                return
            except UpstreamError as exc:
                wait = exc.data.get("retry_after_s")
                if not isinstance(wait, int | float) or loop.time() + wait > deadline:
                    raise
                await asyncio.sleep(wait)

    @contextlib.asynccontextmanager
    async def temporary(
        self, connection: dict[str, Any], *, timeout_s: float, home: str = ""
    ) -> AsyncIterator[McpSession]:
        """A session that is not pooled (imports, dry runs); closed on exit. ``home``: the
        toolkit whose work directory and sandbox HOME a stdio server gets, so what it
        installs or writes there stays the toolkit's."""
        key = f"import-{id(connection):x}"
        if home:
            connection = {**connection, "home": home, "cwd": home}
        session = await self._open(key, connection, timeout_s)
        try:
            yield session
        finally:
            await session.aclose()

    async def session(self, key: str, connection: dict[str, Any], *, timeout_s: float) -> McpSession:
        async with self._locks.setdefault(key, asyncio.Lock()):
            held = self._sessions.get(key)
            if (
                held is not None
                and held[1] == connection
                and not held[0].is_closed
                and await self._child_running(key, connection)
            ):
                return held[0]
            if held is not None:  # gone (a child died, a server restarted) or reconfigured
                await self._close(key)
            session = await self._open(key, connection, timeout_s, pooled=True)
            self._sessions[key] = (session, dict(connection))
            self._listen(key, session)
            return session

    async def _child_running(self, key: str, connection: dict[str, Any]) -> bool:
        """A pooled stdio session is only as alive as its child: one that has just died
        (its session not told yet) is replaced now, so this call restarts the server."""
        if connection.get("transport") != "stdio":
            return True
        process = self.processes.get(key)
        return process is not None and await process.still_running()

    def _listen(self, key: str, session: McpSession) -> None:
        hook = self.on_tools_changed
        if hook is None or not wants_listen(session):
            return
        task = listen_task(session, key, lambda: hook(key), after_gap=key in self._listened)
        self._listened.add(key)
        self._listens[key] = task
        task.add_done_callback(functools.partial(self._listen_ended, key))

    def _listen_ended(self, key: str, task: asyncio.Task[Any]) -> None:
        if self._listens.get(key) is task:
            del self._listens[key]

    def pooled(self, key: str) -> McpSession | None:
        """The live pooled session of ``key``, if there is one (never opens one)."""
        held = self._sessions.get(key)
        return held[0] if held is not None and not held[0].is_closed else None

    async def call_tool(
        self,
        key: str,
        connection: dict[str, Any],
        name: str,
        arguments: dict[str, Any],
        *,
        timeout_s: float,
        on_progress: ProgressCallback | None = None,
        on_log: LogRelay | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        session = await self.session(key, connection, timeout_s=timeout_s)
        try:
            result = await session.call_tool(
                name, arguments, timeout_s=timeout_s, on_progress=on_progress, on_log=on_log, headers=headers
            )
        except UpstreamError as exc:
            if exc.reason in ("upstream_unavailable", "upstream_invalid"):
                await self.discard(key)
            raise
        cap = _cap(connection)
        # The transports read up to the larger of the setting and this cap; a toolkit cap
        # below the setting is enforced here, on the result as it would be relayed.
        if cap is not None and len(orjson.dumps(result)) > cap:
            raise UpstreamError(
                f"the result of {name!r} is larger than this toolkit's cap of {cap} bytes",
                reason="upstream_too_large",
                data={"max_bytes": cap},
            )
        return result

    async def discard(self, key: str) -> None:
        async with self._locks.setdefault(key, asyncio.Lock()):
            await self._close(key)

    async def forget(self, key: str) -> None:
        """The toolkit is gone: its session, its stdio child and the child's crash back-off."""
        async with self._locks.setdefault(key, asyncio.Lock()):
            await self._close(key)
            await self.processes.remove(key)
        self._listened.discard(key)

    async def _close(self, key: str) -> None:
        listen = self._listens.pop(key, None)
        if listen is not None:
            listen.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await listen
        held = self._sessions.pop(key, None)
        if held is not None:
            with contextlib.suppress(Exception):
                await held[0].aclose()

    async def aclose(self) -> None:
        for key in list(self._sessions):
            await self._close(key)
        await self.processes.aclose()
