"""An MCP server (official SDK) whose tool set a test changes while it runs.

    python dynamic_upstream.py --port 8123        # streamable HTTP on 127.0.0.1:8123/mcp
    python dynamic_upstream.py --port 8123 --sse  # legacy HTTP+SSE on 127.0.0.1:8123/sse

The file named by ``TOOLSET_FILE`` is read at every ``tools/list`` and ``tools/call``:
``{"tools": ["alpha", "beta"], "alpha_v2": false}``. ``tools`` are the names listed (and
callable); ``alpha_v2`` gives ``alpha`` a new description and an extra input property, i.e.
a changed definition behind the same name. ``mutate`` (when listed) rewrites that file and
sends ``notifications/tools/list_changed``, as a server whose tools changed would: on the
2025-era session, and to every open 2026-07-28 ``subscriptions/listen`` stream. When
``LISTEN_FILE`` is set, the number of open listen streams is written there whenever it changes.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.subscriptions import InMemorySubscriptionBus, ServerEvent
from mcp.types import CallToolResult, InputRequiredResult, Tool, ToolAnnotations

READ = ToolAnnotations(read_only_hint=True)


def control() -> dict[str, Any]:
    with open(os.environ["TOOLSET_FILE"], encoding="utf-8") as fh:
        return dict(json.load(fh))


class DynamicServer(MCPServer):
    async def list_tools(self) -> list[Tool]:
        state = control()
        out = []
        for t in await super().list_tools():
            if t.name not in state.get("tools", []):
                continue
            if t.name == "alpha" and state.get("alpha_v2"):
                schema = dict(t.input_schema)
                schema["properties"] = {**schema.get("properties", {}), "loud": {"type": "boolean"}}
                t = t.model_copy(
                    update={"description": "Echo text, now optionally loudly.", "input_schema": schema}
                )
            out.append(t)
        return out

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if name not in control().get("tools", []):
            raise ToolError(f"Unknown tool: {name}")
        return await super().call_tool(name, arguments, context)


class CountingBus(InMemorySubscriptionBus):
    """The SDK's in-process bus, telling the test how many listen streams are open."""

    def __init__(self) -> None:
        super().__init__()
        self.open = 0

    def _write(self) -> None:
        if path := os.environ.get("LISTEN_FILE"):
            with open(path + ".tmp", "w", encoding="utf-8") as fh:
                fh.write(str(self.open))
            os.replace(path + ".tmp", path)

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        unsubscribe = super().subscribe(listener)
        self.open += 1
        self._write()
        done = False

        def counted() -> None:
            nonlocal done
            unsubscribe()
            if not done:
                done = True
                self.open -= 1
                self._write()

        return counted


server = DynamicServer(name="dynamic-upstream", version="1.0.0", subscriptions=CountingBus())


@server.tool(annotations=READ)
def alpha(text: str, loud: bool = False) -> str:
    """Echo text."""
    return f"alpha:{text.upper() if loud else text}"


@server.tool(annotations=READ)
def beta(text: str) -> str:
    """Reverse text."""
    return f"beta:{text[::-1]}"


@server.tool(annotations=READ)
def gamma(text: str) -> str:
    """Count the characters of text."""
    return f"gamma:{len(text)}"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
async def mutate(tools: list[str], ctx: Context) -> str:
    """Change the listed tool set and tell the client its tool list changed."""
    with open(os.environ["TOOLSET_FILE"], "w", encoding="utf-8") as fh:
        json.dump({"tools": tools}, fh)
    await ctx.session.send_tool_list_changed()  # 2025 era (dropped by the SDK at 2026-07-28)
    await ctx.notify_tools_changed()  # 2026-07-28: to the open subscriptions/listen streams
    return "changed"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int)
    p.add_argument("--stdio", action="store_true")
    # Legacy SSE is always the 2025 era, where a server may notify the client at any time;
    # in the 2026-07-28 era list_changed only reaches clients that opened subscriptions/listen.
    p.add_argument("--sse", action="store_true")
    args = p.parse_args()
    if args.stdio:
        server.run(transport="stdio")
        return
    import uvicorn

    app = server.sse_app(host="127.0.0.1") if args.sse else server.streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
