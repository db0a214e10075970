"""A stdio MCP server that leaks the secret it was given in ``CANARY_TOKEN``.

Run by the canary sweep as a stdio toolkit whose ``CANARY_TOKEN`` comes from the vault: it
prints the token to stderr at start, returns it (plain and as base64 of ``user:<token>``)
from ``echo_env``, quotes it in the error of ``fail_env`` and in a JSON-RPC error from
``broken_env``. Newline-delimited JSON-RPC on stdin/stdout, no SDK needed.
"""

from __future__ import annotations

import base64
import json
import os
import sys

TOKEN = os.environ.get("CANARY_TOKEN", "")
SCHEMA = {"type": "object", "properties": {}}
TOOLS = [
    {"name": name, "inputSchema": SCHEMA, "annotations": {"readOnlyHint": True}}
    for name in ("echo_env", "fail_env", "broken_env")
]


def answer(msg: dict) -> dict | None:
    if "id" not in msg:
        return None
    reply: dict = {"jsonrpc": "2.0", "id": msg["id"]}
    method = msg.get("method")
    name = (msg.get("params") or {}).get("name")
    if method == "initialize":
        version = (msg.get("params") or {}).get("protocolVersion", "2025-11-25")
        info = {"name": "canary-stdio", "version": "1"}
        reply["result"] = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}
    elif method == "tools/list":
        reply["result"] = {"tools": TOOLS}
    elif method == "tools/call" and name == "echo_env":
        basic = base64.b64encode(f"user:{TOKEN}".encode()).decode()
        reply["result"] = {
            "content": [{"type": "text", "text": f"token={TOKEN} basic={basic}"}],
            "isError": False,
        }
    elif method == "tools/call" and name == "fail_env":
        reply["result"] = {"content": [{"type": "text", "text": f"token {TOKEN} revoked"}], "isError": True}
    elif method == "tools/call" and name == "broken_env":
        reply["error"] = {"code": -32000, "message": f"token {TOKEN} revoked"}
    elif method == "ping":
        reply["result"] = {}
    else:
        reply["error"] = {"code": -32601, "message": f"no method {method} (token {TOKEN})"}
    return reply


def main() -> None:
    print(f"canary-stdio starting with token {TOKEN}", file=sys.stderr, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
