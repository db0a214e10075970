"""``toolspoke stdio``: the bridge over stdio, for desktop clients that spawn their servers.

One line in, one JSON-RPC message; one line out. stdout carries nothing but MCP messages
(logs go to stderr). The caller is the API key the client's config passes in the
environment, checked once at start and again on every request, exactly as on HTTP: a key
revoked while the client runs stops working on its next call. Both eras are served: a
request with the 2026-07-28 envelope is answered statelessly; ``initialize`` starts the
legacy session, which on stdio lasts as long as the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from typing import Any, BinaryIO

from appliance.access import keys
from appliance.errors import ApplianceError, InvalidRequest
from appliance.gateway.runtime import Runtime
from appliance.models import Principal
from appliance.protocol import versions
from appliance.protocol.meta import PROTOCOL_VERSION_KEY
from appliance.rpc import jsonrpc, mcp, modern
from appliance.web import stdio_lines

log = logging.getLogger(__name__)
MAX_LINE = 4 * 1024 * 1024  # bytes of one message, its newline not counted


class StdioFace:
    def __init__(self, rt: Runtime, key: str, out: BinaryIO) -> None:
        self.rt = rt
        self.key = key
        self.out = out
        self.legacy_version: str | None = None
        self.log_level = "debug"  # legacy era: the least severe relayed log, until logging/setLevel
        self._tasks: dict[Any, asyncio.Task[None]] = {}
        self._write_lock = asyncio.Lock()
        # The legacy initialize being answered: requests that arrive before its answer wait
        # for it rather than being refused (stdio is ordered, and clients do pipeline).
        self._initializing: asyncio.Task[None] | None = None

    async def principal(self) -> Principal:
        async with self.rt.db.read() as conn:
            return await keys.authenticate(conn, self.key)

    def set_log_level(self, level: str) -> None:
        self.log_level = level

    async def write(self, payload: dict[str, Any]) -> None:
        async with self._write_lock:
            self.out.write(jsonrpc.encode(payload) + b"\n")
            self.out.flush()

    async def handle_line(self, line: bytes) -> None:
        try:
            msg = jsonrpc.parse(line)
        except InvalidRequest as exc:
            await self.write(jsonrpc.error(exc.data.get("id"), exc))
            return
        if msg.kind == "notification":
            request_id = msg.params.get("requestId")
            if msg.method == "notifications/cancelled" and isinstance(request_id, str | int):
                task = self._tasks.get(request_id)
                if task is not None:
                    task.cancel()
            return
        if msg.kind != "request":
            return  # responses: we send the client no requests
        task = asyncio.create_task(self._answer(msg))
        request_id = msg.id
        self._tasks[request_id] = task
        if msg.method == "initialize" and self.legacy_version is None:
            self._initializing = task

        def forget(_: asyncio.Task[None]) -> None:
            self._tasks.pop(request_id, None)

        task.add_done_callback(forget)

    async def _answer(self, msg: jsonrpc.Message) -> None:
        try:
            reply = await self._reply(msg)
        except asyncio.CancelledError:
            return  # cancelled by the client: no answer is expected
        await self.write(reply)

    async def _reply(self, msg: jsonrpc.Message) -> dict[str, Any]:
        try:
            principal = await self.principal()
            if versions.is_modern(PROTOCOL_VERSION_KEY in msg.meta, msg.method, None):
                envelope = modern.check_envelope(msg, None)
                ctx = mcp.CallContext(
                    principal,
                    envelope.protocol_version,
                    modern=True,
                    notify=self.write,
                    log_level=envelope.log_level,
                    client_capabilities=envelope.client_capabilities,
                )
                return await mcp.respond(self.rt, ctx, msg)
            if msg.method == "initialize":
                reply = await mcp.respond(self.rt, mcp.CallContext(principal, versions.LATEST_LEGACY), msg)
                if "result" in reply:
                    self.legacy_version = reply["result"]["protocolVersion"]
                return reply
            pending = self._initializing
            if self.legacy_version is None and pending is not None and not pending.done():
                await asyncio.wait({pending})  # never raises, whatever became of it
            if self.legacy_version is None and msg.method not in ("ping", "server/discover"):
                raise InvalidRequest("send initialize (or a 2026-07-28 request) first", field="method")
            ctx = mcp.CallContext(
                principal,
                self.legacy_version or versions.LATEST_LEGACY,
                notify=self.write,
                log_level=self.log_level,
            )
            ctx.set_log_level = self.set_log_level
            return await mcp.respond(self.rt, ctx, msg)
        except ApplianceError as exc:
            return jsonrpc.error(msg.id, exc)

    async def drain(self) -> None:
        tasks = list(self._tasks.values())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


async def serve_stdio(
    rt: Runtime, key: str, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None
) -> None:
    """Serve until stdin closes; in-flight calls finish before the process exits."""
    face = StdioFace(rt, key, stdout or sys.stdout.buffer)
    await face.principal()  # a bad key fails at start, before the client sends anything
    async with contextlib.aclosing(stdio_lines.chunks(stdin or sys.stdin.buffer)) as source:
        async for line in stdio_lines.lines(source, MAX_LINE):
            if isinstance(line, stdio_lines.TooLong):
                await face.write(jsonrpc.error(None, too_long(line.limit)))
            elif line.strip():
                await face.handle_line(line)
    await face.drain()


def too_long(limit: int) -> InvalidRequest:
    """The answer to a line over the limit: its id is unknown (the line was never parsed)."""
    return InvalidRequest(
        f"message too large: a line may hold at most {limit} bytes ({limit // (1024 * 1024)} MiB);"
        " it was discarded",
        field="message",
        data={"limit_bytes": limit},
    )
