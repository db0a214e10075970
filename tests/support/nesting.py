"""What the nesting-limit tests share, in process (tests/rpc) and over a real server (e2e):
the messages that nest too deep, the session they are sent in, the refusal they must get."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

import httpx

from appliance.rpc.jsonrpc import MAX_DEPTH
from tests.support.accounts import open_db

LEGACY = "2025-11-25"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


class HasData(Protocol):
    data_dir: Path


def arrays(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth  # orjson and json write far fewer levels: build the text


def deep_call(name: str, depth: int, request_id: int = 7) -> str:
    """A tools/call of ``name`` whose ``tool`` and ``input`` arguments nest ``depth`` levels."""
    return (
        f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", "params": {{"name": "{name}", '
        f'"arguments": {{"tool": {arrays(depth)}, "input": {{"x": {arrays(depth)}}}}}}}}}'
    )


def audit_rows(app: HasData) -> list[tuple[Any, ...]]:
    with closing(open_db(app.data_dir, read_only=True)) as conn:
        return conn.execute("SELECT tool, runner, outcome FROM audit_log ORDER BY id").fetchall()


def session(http: httpx.Client, path: str) -> dict[str, str]:
    opened = http.post(path, json=INIT)
    assert opened.status_code == 200, opened.text
    return {"Mcp-Session-Id": opened.headers["mcp-session-id"], "Content-Type": "application/json"}


def assert_nesting_refused(error: dict[str, Any], code: int, field: str) -> None:
    assert (error["code"], error["data"]["field"], error["data"]["limit"]) == (code, field, MAX_DEPTH)
    assert f"deeper than {MAX_DEPTH} levels" in error["message"]
