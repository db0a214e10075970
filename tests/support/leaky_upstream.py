"""An MCP server (official SDK, streamable HTTP) that repeats the credentials it was sent.

    python leaky_upstream.py --port 8123      # 127.0.0.1:8123/mcp

The upstream a gateway must not trust with its secrets: every answer quotes the
``Authorization`` header of the request ("token Bearer <the token> revoked", as real APIs
say) and the text of ``LEAK_FILE`` (read at every request, so a test changes it while the
server runs): ``{"leak": "...", "fail_list": false}``. ``fail_list`` makes ``tools/list``
a JSON-RPC error (an import or a sync fails quoting the secrets); otherwise the one tool's
description quotes them. ``echo`` answers them as its result, ``refuse`` as an ``isError``
result, ``explode`` as a JSON-RPC error.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import Tool, ToolAnnotations

# The last request's header (one gateway talks to it; the SDK runs handlers in tasks of its
# own, where a context variable set per request would not be seen).
AUTHORIZATION = [""]


def leak() -> str:
    with open(os.environ["LEAK_FILE"], encoding="utf-8") as fh:
        state = dict(json.load(fh))
    return f"token {AUTHORIZATION[0]} revoked; also {state.get('leak', '')}"


def failing_list() -> bool:
    with open(os.environ["LEAK_FILE"], encoding="utf-8") as fh:
        return bool(json.load(fh).get("fail_list"))


class LeakyServer(MCPServer):
    async def list_tools(self) -> list[Tool]:
        if failing_list():
            raise MCPError(code=-32000, message=leak())
        return [t.model_copy(update={"description": leak()}) for t in await super().list_tools()]


server = LeakyServer(name="leaky-upstream", version="1.0.0")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(mode: str = "ok") -> str:
    """Say what it knows."""
    if mode == "refuse":
        raise ToolError(leak())
    if mode == "explode":
        raise MCPError(code=-32000, message=leak())
    return leak()


def with_authorization(app: Any) -> Any:
    """ASGI middleware: the request's Authorization header, for ``leak()``."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            headers = dict(scope.get("headers") or [])
            AUTHORIZATION[0] = headers.get(b"authorization", b"").decode("latin-1")
        await app(scope, receive, send)

    return wrapped


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    import uvicorn

    app = with_authorization(server.streamable_http_app(host="127.0.0.1"))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
