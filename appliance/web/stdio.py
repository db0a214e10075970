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

from appliance.errors import ApplianceError, InvalidRequest
from appliance.gateway import auth
from appliance.gateway.runtime import Runtime
from appliance.models import Principal
from appliance.rpc import jsonrpc
from appliance.rpc.session import Session, is_modern
from appliance.web import stdio_lines

log = logging.getLogger(__name__)
MAX_LINE = 4 * 1024 * 1024  # bytes of one message, its newline not counted


class StdioFace:
    """One stdio process: its lines in and out, and the one session the process is."""

    def __init__(self, rt: Runtime, key: str, key_prefix: str, out: BinaryIO) -> None:
        self.rt = rt
        self.key = key
        self.out = out
        self.session = Session(key_prefix)
        self._write_lock = asyncio.Lock()

    async def principal(self) -> Principal:
        return await auth.authenticate(self.rt, self.key, fresh=True)

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
        if msg.kind != "request":
            self.session.notice(msg)  # a notification, or the answer to an elicitation/create
            return
        task = asyncio.create_task(self._answer(msg))
        self.session.track(msg.id, task)
        if msg.method == "initialize" and not is_modern(msg):
            # stdio is ordered and clients do pipeline: what follows waits for this answer.
            self.session.handshake_running(task)

    async def _answer(self, msg: jsonrpc.Message) -> None:
        try:
            reply = await self._reply(msg)
        except asyncio.CancelledError:
            return  # cancelled by the client: no answer is expected
        await self.write(reply)

    async def _reply(self, msg: jsonrpc.Message) -> dict[str, Any]:
        try:
            principal = await self.principal()  # every request, as on HTTP: revocation counts
        except ApplianceError as exc:
            return jsonrpc.error(msg.id, exc)
        return await self.session.answer(self.rt, principal, msg, notify=self.write)

    async def drain(self) -> None:
        await self.session.drain()


async def serve_stdio(
    rt: Runtime, key: str, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None
) -> None:
    """Serve until stdin closes; in-flight calls finish before the process exits."""
    # A bad key fails at start, before the client sends anything.
    principal = await auth.authenticate(rt, key, fresh=True)
    face = StdioFace(rt, key, principal.key_prefix, stdout or sys.stdout.buffer)
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
