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

from appliance.children.processes import StdioProcess
from appliance.errors import UpstreamError
from appliance.mcpclient.session import McpSession

log = logging.getLogger(__name__)
# Not traffic for the idle timer: liveness checks, and the 2026-07-28 listen stream (its
# request, acknowledgement and change notices), which would otherwise keep an idle server
# running forever (it is re-opened with the next session, when the child runs again).
_PROBES = ("ping", "server/discover", "subscriptions/listen")
_QUIET_NOTICES = frozenset(
    {
        "notifications/subscriptions/acknowledged",
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
    }
)


class StdioTransport:
    inline_answers = False  # answers arrive on stdout, whenever the server sends them
    request_scoped = False  # one shared channel: cancellation is notifications/cancelled

    def __init__(self, process: StdioProcess) -> None:
        self.process = process
        self._session: McpSession | None = None
        self._reader: asyncio.Task[None] | None = None
        # Liveness checks in flight (``ping``/``server/discover`` ids): neither they nor
        # their answers count as traffic, or health probes would keep idle servers alive.
        self._probes: set[Any] = set()

    async def start(self, session: McpSession) -> None:
        self._session = session
        await self.process.start()
        self._reader = asyncio.create_task(self._pump(session), name="toolspoke-stdio-reader")

    async def _pump(self, session: McpSession) -> None:
        try:
            while True:
                line = await self.process.read_line(touch=False)
                try:
                    message: Any = orjson.loads(line)
                except orjson.JSONDecodeError:
                    self.process.touch()
                    log.warning("stdio upstream wrote a line that is not JSON; dropped")
                    continue
                if not self._answers_probe(message):
                    self.process.touch()
                session.deliver(message)
        except UpstreamError as exc:
            session.closed(exc)

    def _answers_probe(self, message: Any) -> bool:
        if isinstance(message, dict) and message.get("method") in _QUIET_NOTICES and "id" not in message:
            return True
        if not isinstance(message, dict) or "method" in message or message.get("id") not in self._probes:
            return False
        self._probes.discard(message["id"])
        return True

    def _is_probe(self, message: dict[str, Any]) -> bool:
        if message.get("method") in _PROBES and "id" in message:
            self._probes.add(message["id"])
            return True
        if message.get("method") == "notifications/cancelled":
            abandoned = (message.get("params") or {}).get("requestId")
            if abandoned in self._probes:
                self._probes.discard(abandoned)
                return True
        return False

    async def send(self, message: dict[str, Any], *, timeout_s: float | None = None) -> None:
        await self.process.write_line(orjson.dumps(message), touch=not self._is_probe(message))

    def negotiated(self, version: str, *, modern: bool) -> None:
        """Nothing to do: stdio carries no per-era headers."""

    async def aclose(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        # One MCP session per process: a new session needs a fresh child and handshake.
        await self.process.stop()
