"""A tiny stdio MCP server (2025-11-25, raw JSON lines) whose ``freeze`` tool hangs it.

After answering ``freeze`` it keeps running and reading its input but answers nothing
more, not even ``ping``: the hung child the health probes must notice. A fresh process
answers again. Stdlib only, so the test needs nothing installed.

``--ignore-sigterm``: SIGTERM does nothing (only SIGKILL stops it). ``--grandchild``: it
starts a ``sleep`` of its own that outlives it unless its process group is killed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

TOOLS = [
    {
        "name": "freeze",
        "description": "Answer this call, then stop answering anything",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "hello",
        "description": "Say hello",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
]


def answer(message: dict[str, object]) -> dict[str, object] | None:
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        version = params.get("protocolVersion", "2025-11-25") if isinstance(params, dict) else "2025-11-25"
        return {
            "protocolVersion": version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "hanging", "version": "1"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call" and isinstance(params, dict):
        return {"content": [{"type": "text", "text": f"{params.get('name')}: ok"}]}
    return None


def main() -> None:
    if "--ignore-sigterm" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "--grandchild" in sys.argv:
        subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    frozen = False
    for line in sys.stdin:
        message = json.loads(line)
        if frozen or "id" not in message or "method" not in message:
            continue  # notifications and replies need no answer; a frozen server gives none
        result = answer(message)
        if result is None:
            reply = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": -32601, "message": "no such method"},
            }
        else:
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        print(json.dumps(reply), flush=True)
        params = message.get("params")
        if message["method"] == "tools/call" and isinstance(params, dict) and params.get("name") == "freeze":
            frozen = True


if __name__ == "__main__":
    main()
