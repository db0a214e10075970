"""An MCP server over stdio whose tool descriptions a test writes (test-only, no SDK).

The file named by ``POISON_TOOLS`` is read at every ``tools/list``: a JSON list of tools
(``name``, ``description``, ``inputSchema``), so a test can poison a description, or change
one between two re-syncs. Every call answers ``<name>:<arguments as JSON>``, so a test sees
that an approved tool really runs. Run as ``python tests/support/poisoned_stdio.py``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _tools() -> list[dict[str, Any]]:
    with open(os.environ["POISON_TOOLS"], encoding="utf-8") as fh:
        listed: list[dict[str, Any]] = json.load(fh)
    return [{"annotations": {"readOnlyHint": True}, **t} for t in listed]


def _answer(msg: dict[str, Any]) -> dict[str, Any]:
    method = msg.get("method")
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "poisoned", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": _tools()}
    elif method == "tools/call":
        params = msg.get("params") or {}
        text = f"{params.get('name')}:{json.dumps(params.get('arguments') or {}, sort_keys=True)}"
        result = {"content": [{"type": "text", "text": text}]}
    else:
        return {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no such method"}}
    return {"jsonrpc": "2.0", "id": msg["id"], "result": result}


def main() -> None:
    for line in sys.stdin:
        msg = json.loads(line)
        if "id" in msg:
            print(json.dumps(_answer(msg)), flush=True)


if __name__ == "__main__":
    main()
