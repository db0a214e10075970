"""A real SDK upstream whose tool set the test changes (tests/support/dynamic_upstream.py,
started as a process on a free port), and what an agent then sees of a tool: for the
re-sync tests in process (tests/web/test_admin_sync.py) and on a real serve
(tests/e2e/test_mcp_resync.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.support.peers import free_port, peer

DYNAMIC = Path(__file__).resolve().parent / "dynamic_upstream.py"
NOWHERE = {"search": False, "describe": False, "run": False, "direct": False}
EVERYWHERE = {"search": True, "describe": True, "run": True, "direct": True}


class Upstream:
    def __init__(self, control: Path, url: str) -> None:
        self.control, self.url = control, url

    def set(self, tools: list[str], *, alpha_v2: bool = False) -> None:
        self.control.write_text(json.dumps({"tools": tools, "alpha_v2": alpha_v2}))


@contextmanager
def dynamic_upstream(tmp_path: Path, tools: list[str]) -> Iterator[Upstream]:
    port = free_port()
    up = Upstream(tmp_path / "toolset.json", f"http://127.0.0.1:{port}/mcp")
    up.set(tools)
    argv = [sys.executable, str(DYNAMIC), "--port", str(port)]
    with peer(argv, port, tmp_path / "upstream.log", env={"TOOLSET_FILE": str(up.control)}):
        yield up


async def outcome(client: Client, tool: str, args: dict[str, Any]) -> tuple[bool, str]:
    """(is_error, text) of a call, whether it fails as a result or as a JSON-RPC error."""
    try:
        result = await client.call_tool(tool, args)
    except MCPError as exc:
        return True, str(exc)
    text = result.content[0].text if result.content and hasattr(result.content[0], "text") else ""
    return bool(result.is_error), text


async def visible(client: Client, name: str, query: str, slug: str) -> dict[str, bool]:
    """Where an agent can see ``name``: search, describe, the runner, a direct call."""
    found = (await client.call_tool("search_tools", {"query": query, "toolkit": slug})).structured_content
    described = (await client.call_tool("describe_tools", {"names": [name]})).structured_content
    ran = await outcome(client, "use_tool", {"tool": name, "input": {"text": "abc"}})
    direct = await outcome(client, name, {"text": "abc"})
    return {
        "search": any(r["name"] == name for r in found["results"]),
        "describe": bool(described["tools"]),
        "run": not ran[0],
        "direct": not direct[0],
    }


async def same_as_nonexistent(client: Client, name: str, slug: str) -> None:
    """A hidden tool fails exactly like a name that never existed (nothing reveals it)."""
    # The same shape as ``name`` (another slug, the same action): a did-you-mean depends on the
    # spelling typed, so only a ghost spelled alike must be answered alike.
    ghost = f"{slug}z__{name.split('__', 1)[1]}"
    for runner_args in ({"tool": name, "input": {"text": "abc"}}, {"tool": ghost, "input": {"text": "abc"}}):
        is_error, _ = await outcome(client, "use_tool", runner_args)
        assert is_error
    hidden = await outcome(client, "use_tool", {"tool": name, "input": {"text": "abc"}})
    absent = await outcome(client, "use_tool", {"tool": ghost, "input": {"text": "abc"}})
    assert hidden[1].replace(name, "X") == absent[1].replace(ghost, "X")
    hidden = await outcome(client, name, {"text": "abc"})
    absent = await outcome(client, ghost, {"text": "abc"})
    assert hidden[0] and hidden[1].replace(name, "X") == absent[1].replace(ghost, "X")
