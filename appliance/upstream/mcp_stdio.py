"""The stdio transport for ``McpSession``: JSON-RPC lines over a supervised child process.

``processes.StdioProcess`` owns the child (spawn, environment, group kill, back-off); this
adapter only turns its stdout lines into messages for the session and messages into stdin
lines. When the child dies, the session hears it at once through ``closed`` and every open
request fails with the exit status, instead of waiting for its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson

from appliance.errors import UpstreamError
from appliance.upstream.mcp_session import McpSession
from appliance.upstream.processes import StdioProcess

log = logging.getLogger(__name__)


class StdioTransport:
    inline_answers = False  # answers arrive on stdout, whenever the server sends them
    request_scoped = False  # one shared channel: cancellation is notifications/cancelled

    def __init__(self, process: StdioProcess) -> None:
        self.process = process
        self._session: McpSession | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self, session: McpSession) -> None:
        self._session = session
        await self.process.start()
        self._reader = asyncio.create_task(self._pump(session), name="toolspoke-stdio-reader")

    async def _pump(self, session: McpSession) -> None:
        try:
            while True:
                line = await self.process.read_line()
                try:
                    message: Any = orjson.loads(line)
                except orjson.JSONDecodeError:
                    log.warning("stdio upstream wrote a line that is not JSON; dropped")
                    continue
                session.deliver(message)
        except UpstreamError as exc:
            session.closed(exc)

    async def send(self, message: dict[str, Any], *, timeout_s: float | None = None) -> None:
        await self.process.write_line(orjson.dumps(message))

    def negotiated(self, version: str, *, modern: bool) -> None:
        """Nothing to do: stdio carries no per-era headers."""

    async def aclose(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        # One MCP session per process: a new session needs a fresh child and handshake.
        await self.process.stop()
