#!/usr/bin/env python3
"""Controllable upstream MCP server for gateway tests (the project's own, first written for the
team's shared peers; built on the official
Python SDK, PyPI `mcp` 2.x, whose FastMCP class is now `MCPServer`).

Start (pick one transport; binds 127.0.0.1 by default):
    python upstream_server.py --transport streamable-http --port 8765  # POST/GET/DELETE /mcp
    python upstream_server.py --transport sse --port 8766  # GET /sse, POST /messages/?session_id=...
    python upstream_server.py --transport stdio  # newline-delimited JSON-RPC on stdin/stdout
UPSTREAM_TRANSPORT=stdio does the same as --transport stdio (for launchers such as
the MCP Inspector CLI that would swallow a --transport flag).
Options: --bearer TOKEN (HTTP transports answer 401 + WWW-Authenticate unless
"Authorization: Bearer TOKEN"), --json-response (streamable HTTP answers
application/json instead of an SSE stream), --stateless (no Mcp-Session-Id).
Needs `pip install 'mcp>=2.3,<3'` (mcp 1.x has no mcp.server.mcpserver).

Tools: read_item (readOnly), write_item (not readOnly, not destructive),
delete_item (destructive), add (structured output), slow (sleeps, sends
progress), big_result (default 1 MiB text), fail (isError result),
protocol_error (JSON-RPC error), echo_headers (HTTP headers the server saw).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import ToolAnnotations

STORE: dict[str, str] = {"hello": "world"}

server = MCPServer(
    name="gateway-test-upstream",
    version="1.0.0",
    instructions="Controllable upstream for gateway tests.",
)


@server.tool(
    annotations=ToolAnnotations(
        title="Read item", read_only_hint=True, idempotent_hint=True, open_world_hint=False
    )
)
def read_item(key: str) -> str:
    """Return the value stored under key ('' when missing)."""
    return STORE.get(key, "")


@server.tool(
    annotations=ToolAnnotations(
        title="Write item",
        read_only_hint=False,
        destructive_hint=False,
        idempotent_hint=True,
        open_world_hint=False,
    )
)
def write_item(key: str, value: str) -> str:
    """Store value under key."""
    STORE[key] = value
    return f"stored {key}"


@server.tool(
    annotations=ToolAnnotations(
        title="Delete item",
        read_only_hint=False,
        destructive_hint=True,
        idempotent_hint=True,
        open_world_hint=False,
    )
)
def delete_item(key: str) -> str:
    """Delete key from the store."""
    existed = STORE.pop(key, None) is not None
    return f"deleted {key}" if existed else f"no such key {key}"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers (structured output: {"result": a+b})."""
    return a + b


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def slow(ctx: Context, seconds: float = 5.0) -> str:
    """Sleep for `seconds`, reporting progress once a second (if the client sent a progressToken)."""
    steps = max(1, int(seconds))
    for i in range(steps):
        await asyncio.sleep(seconds / steps)
        await ctx.report_progress(i + 1, steps, f"step {i + 1}/{steps}")
    return f"slept {seconds}s"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def big_result(size_bytes: int = 1024 * 1024) -> str:
    """Return a text result of exactly size_bytes ASCII characters (default 1 MiB)."""
    return "x" * size_bytes


@server.tool()
def fail(message: str = "boom") -> str:
    """Always fails: the result has isError=true and the message as text."""
    raise ToolError(message)


@server.tool()
def protocol_error(code: int = -32603, message: str = "upstream protocol error") -> str:
    """Always fails with a JSON-RPC error response (not an isError result)."""
    raise MCPError(code, message)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo_headers(ctx: Context) -> str:
    """Return the HTTP request headers this server saw (JSON), e.g. to check header forwarding."""
    headers = ctx.headers
    return json.dumps(dict(headers) if headers is not None else None, sort_keys=True)


def _bearer_guard(app, token: str):
    """ASGI wrapper: every HTTP request must carry 'Authorization: Bearer <token>'."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            auth = dict(scope.get("headers") or []).get(b"authorization")
            if auth != expected:
                body = b'{"error":"invalid_token"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer error="invalid_token"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--transport",
        choices=["streamable-http", "sse", "stdio"],
        default=os.environ.get("UPSTREAM_TRANSPORT", "streamable-http"),
        help="default: $UPSTREAM_TRANSPORT or streamable-http",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--bearer", default=None, help="require this bearer token on HTTP transports")
    p.add_argument(
        "--json-response", action="store_true", help="streamable HTTP: reply application/json, not SSE"
    )
    p.add_argument("--stateless", action="store_true", help="streamable HTTP: stateless mode (no session id)")
    args = p.parse_args()

    if args.transport == "stdio":
        server.run("stdio")
        return

    import uvicorn

    if args.transport == "sse":
        app = server.sse_app(host=args.host)
    else:
        app = server.streamable_http_app(
            host=args.host, json_response=args.json_response, stateless_http=args.stateless
        )
    if args.bearer:
        app = _bearer_guard(app, args.bearer)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
