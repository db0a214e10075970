"""The reference test upstream plus tools that report what the gateway relayed to it (test-only).

``tests/support/upstream_server.py`` cannot tell a test whether a call was cancelled: its
``slow`` tool just stops. This wraps it (same transports and flags) and adds:

- ``hold(seconds)``: reports progress 0 at once (so a caller knows it runs), then waits; when
  the call is cancelled it records that before unwinding.
- ``cancellations(at_least, wait_s)``: how many ``hold`` calls were cancelled, answered as soon
  as there are ``at_least`` or after ``wait_s`` (a bounded wait on the server side, so tests
  need no sleeps).
- ``chatty()``: one log message at each of debug, info, warning and error.
- ``together(group, tag, tagged)``: logs ``"<tag> arrived"``, waits (bounded) until a second
  call of ``group`` arrived, logs ``"<tag> together"`` while both run, and returns. With
  ``tagged`` its log messages carry the request's progress token in ``_meta`` (a server that
  tags its logs, which is what lets a 2025-era client attribute them on a shared channel).
- ``needs_sampling()``: ``-32021`` (``requiredCapabilities: {sampling: {}}``) for a caller
  that did not declare sampling, as a 2026-07-28 server must.
- ``regional(region, query)``: ``region`` carries ``x-mcp-header: Region`` (SEP-2243); the
  result is the ``Mcp-Param-Region`` header this server received (null without one).

    python tests/support/relay_upstream.py --transport streamable-http --port 8765
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

sys.path.insert(0, str(Path(__file__).resolve().parent))

import upstream_server  # the project's reference upstream, found through the path above
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp.types import LoggingMessageNotification, LoggingMessageNotificationParams, ToolAnnotations

READ = ToolAnnotations(read_only_hint=True)
server: Any = upstream_server.server
cancelled: list[str] = []
# Set at every cancellation. Recording one must not await: the SDK cancels a handler through an
# anyio cancel scope, which raises again at every await until the handler unwinds, so a lock
# taken while `cancellations` held it lost the record (the relay test saw one cancellation too
# few, now and then).
changed = asyncio.Event()


@server.tool(annotations=READ)
async def hold(ctx: Context, seconds: float = 30.0) -> str:
    """Report progress 0, then wait `seconds`; a cancellation is recorded."""
    await ctx.report_progress(0, 1, "holding")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        cancelled.append(ctx.request_id)
        changed.set()
        raise
    return f"held {seconds}s"


@server.tool(annotations=READ)
async def cancellations(at_least: int = 1, wait_s: float = 10.0) -> dict[str, int]:
    """How many hold calls were cancelled; waits up to wait_s for at_least of them."""
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        changed.clear()  # then the count: nothing runs in between, so no setting is missed
        remaining = deadline - asyncio.get_running_loop().time()
        if len(cancelled) >= at_least or remaining <= 0:
            return {"count": len(cancelled)}
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), remaining)


@server.tool(annotations=READ)
async def chatty(ctx: Context) -> str:
    """Log one message at each of debug, info, warning and error."""
    for level in ("debug", "info", "warning", "error"):
        await ctx.log(level, f"{level} message", logger_name="chatty")
    return "logged"


arrivals: dict[str, int] = {}
arrived = asyncio.Condition()


def _token(ctx: Context) -> Any:
    meta: Any = ctx.request_context.meta or {}
    return meta.get("progressToken", meta.get("progress_token"))


async def _log(ctx: Context, text: str, meta: dict[str, Any] | None) -> None:
    params = LoggingMessageNotificationParams(level="info", data=text, logger="together", _meta=meta)
    await ctx.request_context.session.send_notification(
        LoggingMessageNotification(params=params), related_request_id=ctx.request_context.request_id
    )


@server.tool(annotations=READ)
async def together(ctx: Context, group: str, tag: str, tagged: bool = False, wait_s: float = 10.0) -> str:
    """Log on arrival, wait for a second call of the group, log again while both run."""
    meta = {"progressToken": _token(ctx)} if tagged and _token(ctx) is not None else None
    await _log(ctx, f"{tag} arrived", meta)
    async with arrived:
        arrivals[group] = arrivals.get(group, 0) + 1
        arrived.notify_all()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(arrived.wait_for(lambda: arrivals[group] >= 2), wait_s)
    await _log(ctx, f"{tag} together", meta)
    return f"{tag} done"


@server.tool(annotations=READ)
def regional(
    ctx: Context,
    region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
    query: str = "",
) -> dict[str, Any]:
    """Return the Mcp-Param-Region header this server received with the call."""
    headers = ctx.headers or {}
    seen = next((v for k, v in headers.items() if k.lower() == "mcp-param-region"), None)
    return {"header": seen, "region": region}


@server.tool(annotations=READ)
def needs_sampling(ctx: Context) -> str:
    """Refuses with -32021 (requiredCapabilities: sampling) unless the caller declared sampling."""
    declared = ctx.session.client_capabilities
    if declared is None or declared.sampling is None:
        data = {"requiredCapabilities": {"sampling": {}}}
        raise MCPError(code=-32021, message="Client did not declare the sampling capability", data=data)
    return "sampling declared"


if __name__ == "__main__":
    upstream_server.main()
