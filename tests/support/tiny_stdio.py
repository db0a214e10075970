"""The smallest MCP server over stdio, for supervisor and lifecycle tests (test-only).

No SDK, so a start or a restart costs one interpreter start. One read tool, ``hello``; a call
answers ``hello`` with the server's pid as structured content, so a test can tell one child
from its replacement. Run it as ``python tests/support/tiny_stdio.py``; ``connection()`` gives
the stdio connection a toolkit or a pool uses.

With ``TINY_TOOLS`` naming a file, the tools listed are that file's JSON list (``name``,
``description``, ``inputSchema``), read at every ``tools/list``, so a test can poison a
description or change one between two re-syncs; a call then answers
``<name>:<arguments as sorted JSON>``. A file named as its argument does the same
(``connection(tools)``). A sandboxed child sees only the paths the sandbox lets it read: keep
the file in a folder named by ``servers.sandbox_reading``, never inside the data directory.
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


def _tools_file() -> str | None:
    return sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TINY_TOOLS")


def _listed() -> list[dict[str, Any]]:
    path = _tools_file()
    if not path:
        return [HELLO]
    listed: list[dict[str, Any]] = json.loads(Path(path).read_text(encoding="utf-8"))
    return [{"annotations": {"readOnlyHint": True}, **t} for t in listed]


def _answer(msg: dict[str, Any]) -> dict[str, Any]:
    method = msg.get("method")
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "tiny", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": _listed()}
    elif method == "tools/call" and _tools_file():
        params = msg.get("params") or {}
        text = f"{params.get('name')}:{json.dumps(params.get('arguments') or {}, sort_keys=True)}"
        result = {"content": [{"type": "text", "text": text}]}
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
