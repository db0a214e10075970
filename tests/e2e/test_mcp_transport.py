"""The /mcp endpoint on a real ``toolspoke serve``, over raw HTTP: what needs the socket.

The transport's rules themselves are checked in process (tests/web/test_mcp_transport.py);
here a session's whole life runs over loopback, so the real server stays covered end to end
on that path, and an oversized body meets the cap that Sanic's own server enforces (an ASGI
app is handed a body whatever its size).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.clients import INIT
from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    with running_appliance(tmp_path_factory.mktemp("transport") / "data") as running:
        yield running


@pytest.fixture
def http(app: Appliance) -> Iterator[httpx.Client]:
    headers = {
        "Authorization": f"Bearer {app.key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    with httpx.Client(base_url=app.base_url, headers=headers, timeout=30) as client:
        yield client


def test_a_session_lives_from_initialize_to_delete_over_the_socket(http: httpx.Client) -> None:
    r = http.post("/mcp", json=INIT)
    assert r.status_code == 200, r.text
    headers = {"Mcp-Session-Id": r.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    note = http.post("/mcp", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert note.status_code == 202
    listed = http.post("/mcp", headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert "search_tools" in {t["name"] for t in listed.json()["result"]["tools"]}
    assert http.delete("/mcp", headers=headers).status_code == 204
    ping = http.post("/mcp", headers=headers, json={"jsonrpc": "2.0", "id": 3, "method": "ping"})
    assert ping.status_code == 404


def test_an_oversized_body_gets_413(http: httpx.Client) -> None:
    r = http.post("/mcp", content=b'{"x":"' + b"a" * (5 * 1024 * 1024) + b'"}')
    assert r.status_code == 413
