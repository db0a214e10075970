"""The smallest MCP server over stdio, for supervisor and lifecycle tests (test-only).

No SDK, so a start or a restart costs one interpreter start. One read tool, ``hello`` (or the
tools of the JSON file named as its argument); a call answers ``hello`` with the server's pid
as structured content, so a test can tell one child from its replacement. Run it as
``python tests/support/tiny_stdio.py``; ``connection()`` gives the stdio connection a toolkit
or a pool uses.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

HELLO = {
    "name": "hello",
    "description": "Say hello",
    "inputSchema": {"type": "object"},
    "annotations": {"readOnlyHint": True},
}


def connection(tools: Path | None = None) -> dict[str, Any]:
    """How to start it; ``tools``: a JSON file of the tools it lists instead of ``hello``."""
    return {
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(Path(__file__).resolve()), *([str(tools)] if tools is not None else [])],
        "env": {},
    }


TOOLS = json.loads(Path(sys.argv[1]).read_text()) if __name__ == "__main__" and len(sys.argv) > 1 else [HELLO]


def _answer(msg: dict[str, Any]) -> dict[str, Any]:
    method = msg.get("method")
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "tiny", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "hello"}], "structuredContent": {"pid": os.getpid()}}
    else:
        return {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no such method"}}
    return {"jsonrpc": "2.0", "id": msg["id"], "result": result}


def main() -> None:
    for line in sys.stdin:
        msg = json.loads(line)
        if "id" in msg:  # notifications need no answer
            print(json.dumps(_answer(msg)), flush=True)


if __name__ == "__main__":
    main()
