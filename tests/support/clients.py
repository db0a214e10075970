"""Real MCP clients for end-to-end tests: the official SDK and the MCP Inspector CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.support.servers import REPO, Appliance

if TYPE_CHECKING:
    from tests.support.inprocess import InProcess

INSPECTOR = REPO / "tests" / "peers" / "node_modules" / ".bin" / "mcp-inspector"
MODERN = "2026-07-28"
# A 2025-11-25 initialize request, as a raw client sends it.
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


def modern_tools_call(
    key: str, tool: str, arguments: dict[str, Any] | None = None
) -> tuple[dict[str, str], dict[str, Any]]:
    """Headers and body of one stateless 2026-07-28 ``tools/call`` POST to ``/mcp``: the raw
    client of load tests and benches, far lighter on CPU than the SDK's."""
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "load", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params: dict[str, Any] = {"name": tool, "_meta": meta}
    if arguments is not None:
        params["arguments"] = arguments
    return headers, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


def _http_client(
    app: Appliance | InProcess, headers: dict[str, str], streaming: bool = False
) -> httpx.AsyncClient:
    """The SDK's own client for a real appliance; for one served in process, a client with
    the SDK's options whose requests that app answers (tests/support/inprocess.py;
    ``streaming``: answers arrive event by event, as from a socket)."""
    if isinstance(app, Appliance):
        return create_mcp_http_client(headers=headers)
    return app.async_client(
        headers=headers, streaming=streaming, follow_redirects=True, timeout=httpx.Timeout(30, read=300)
    )


@asynccontextmanager
async def connect(
    app: Appliance | InProcess,
    path: str = "/mcp",
    *,
    mode: str = "auto",
    read_timeout_s: float = 60,
    streaming: bool = False,
    **options: Any,
) -> AsyncIterator[Client]:
    """An SDK client on streamable HTTP with the appliance's key (``mode="legacy"``: handshake),
    to a real appliance or to one served in process (``streaming``: its answers streamed, for
    a server request in the middle of a call; a real appliance's always are).

    ``options`` go to ``mcp.Client`` (``logging_callback``, ``log_level``, ...)."""
    # The SDK does not close an http_client it was handed; we own it.
    async with (
        _http_client(app, {"Authorization": f"Bearer {app.key}"}, streaming) as http,
        Client(
            streamable_http_client(app.base_url + path, http_client=http),
            read_timeout_seconds=read_timeout_s,
            mode=mode,
            **options,
        ) as client,
    ):
        yield client


async def call_once(app: Appliance | InProcess, name: str, arguments: dict[str, Any] | None = None) -> Any:
    """One tools/call of ``name`` on a fresh SDK session; its result."""
    async with connect(app) as client:
        return await client.call_tool(name, arguments or {})


def result_text(result: Any) -> str:
    """Everything a tool result shows the agent: its text parts and its structured content."""
    return "".join(getattr(part, "text", "") for part in result.content) + json.dumps(
        result.structured_content or {}
    )


def inspector(app: Appliance, path: str, transport: str, *args: str) -> Any:
    """Run the MCP Inspector CLI (2.12.0) against the appliance; its parsed JSON result."""
    assert INSPECTOR.exists(), "tests/peers is not installed: run `make test` (npm install in tests/peers)"
    assert shutil.which("node"), "node is required for the Inspector CLI"
    done = subprocess.run(
        [
            str(INSPECTOR),
            "--cli",
            app.base_url + path,
            "--transport",
            transport,
            "--header",
            f"Authorization: Bearer {app.key}",
            "--stored-auth-only",
            "--format",
            "json",
            "-q",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)["result"]
