"""The stateless 2026-07-28 revision on /mcp, beside the legacy handshake.

Raw HTTP for the wire rules (envelope, routing headers, status codes), and the official SDK
for the behaviour that matters to clients: a modern client never falls back, a legacy one
still works, and both see the same answers.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    with running_appliance(tmp_path_factory.mktemp("modern") / "data") as running:
        yield running


@pytest.fixture
def http(app: Appliance) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {app.key}", "Accept": "application/json, text/event-stream"}
    with httpx.Client(base_url=app.base_url, headers=headers, timeout=30) as client:
        yield client


def modern(
    http: httpx.Client,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    headers: dict[str, str] | None = None,
    meta: dict[str, Any] | None = META,
) -> httpx.Response:
    body_params = dict(params or {})
    if meta is not None:
        body_params["_meta"] = meta
    routing = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        routing["Mcp-Name"] = body_params["name"]
    routing.update(headers or {})
    return http.post(
        "/mcp",
        headers={k: v for k, v in routing.items() if v is not None},
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": body_params},
    )


def test_server_discover_names_every_supported_version_and_mints_no_session(http: httpx.Client) -> None:
    r = modern(http, "server/discover")
    assert r.status_code == 200
    assert "mcp-session-id" not in r.headers
    result = r.json()["result"]
    assert result["supportedVersions"][0] == MODERN
    assert "2025-11-25" in result["supportedVersions"]
    assert result["resultType"] == "complete"
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "toolspoke"


def test_tools_list_is_cacheable_and_results_are_complete(http: httpx.Client) -> None:
    result = modern(http, "tools/list").json()["result"]
    assert result["resultType"] == "complete"
    assert result["cacheScope"] == "private" and result["ttlMs"] > 0
    assert "search_tools" in {t["name"] for t in result["tools"]}
    called = modern(http, "tools/call", {"name": "search_tools", "arguments": {"query": "create a note"}})
    assert called.json()["result"]["resultType"] == "complete"
    assert called.json()["result"]["structuredContent"]["results"][0]["name"] == "demo__createNote"


def test_a_session_header_on_a_modern_request_is_ignored(http: httpx.Client) -> None:
    r = modern(http, "tools/list", headers={"Mcp-Session-Id": "not-a-session"})
    assert r.status_code == 200 and "mcp-session-id" not in r.headers


@pytest.mark.parametrize(
    ("headers", "field"),
    [
        ({"MCP-Protocol-Version": "2025-11-25"}, "mcp-protocol-version"),
        ({"Mcp-Method": "tools/call"}, "mcp-method"),
        ({"Mcp-Method": None}, "mcp-method"),
    ],
)
def test_routing_headers_that_disagree_with_the_body_get_400_header_mismatch(
    http: httpx.Client, headers: dict[str, str], field: str
) -> None:
    r = modern(http, "tools/list", headers=headers)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == -32020
    assert r.json()["error"]["data"]["field"] == field


def test_mcp_name_must_match_the_tool_and_may_be_base64(http: httpx.Client) -> None:
    args = {"name": "list_toolkits", "arguments": {}}
    wrong = modern(http, "tools/call", args, headers={"Mcp-Name": "use_tool"})
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == -32020
    encoded = "=?base64?" + base64.b64encode(b"list_toolkits").decode() + "?="
    assert modern(http, "tools/call", args, headers={"Mcp-Name": encoded}).status_code == 200


def test_a_duplicated_routing_header_is_refused(app: Appliance) -> None:
    raw = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}})
    headers = [
        ("Authorization", f"Bearer {app.key}"),
        ("Content-Type", "application/json"),
        ("Accept", "application/json"),
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", "tools/list"),
        ("Mcp-Method", "tools/call"),
    ]
    r = httpx.post(app.mcp_url, content=raw, headers=headers, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == -32020


def test_a_missing_envelope_is_400_invalid_params(http: httpx.Client) -> None:
    r = modern(http, "tools/list", meta=None)
    assert r.status_code == 400 and r.json()["error"]["code"] == -32602


def test_an_unsupported_version_is_400_naming_what_is_supported(http: httpx.Client) -> None:
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    r = modern(http, "tools/list", meta=meta, headers={"MCP-Protocol-Version": "2099-01-01"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == -32022
    assert err["data"]["requested"] == "2099-01-01" and MODERN in err["data"]["supported"]


def test_unknown_methods_and_the_removed_ping_are_404_method_not_found(http: httpx.Client) -> None:
    for method in ("ping", "resources/list", "initialize", "initialize2"):
        r = modern(http, method)
        assert r.status_code == 404 and r.json()["error"]["code"] == -32601


def test_a_bad_argument_is_an_iserror_result_in_the_modern_era(http: httpx.Client) -> None:
    r = modern(http, "tools/call", {"name": "search_tools", "arguments": {"query": 5}})
    assert r.status_code == 200
    result = r.json()["result"]
    assert result["isError"] is True and "/query" in result["content"][0]["text"]


def test_an_unknown_tool_is_a_protocol_error(http: httpx.Client) -> None:
    r = modern(http, "tools/call", {"name": "nope__nothing", "arguments": {}})
    assert r.status_code == 400 and r.json()["error"]["code"] == -32602


def test_ten_concurrent_stateless_clients_get_the_same_answers_as_legacy_clients(app: Appliance) -> None:
    async def session(mode: str, n: int) -> tuple[str, list[str], list[str]]:
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {app.key}"}) as http,
            Client(
                streamable_http_client(app.mcp_url, http_client=http), mode=mode, read_timeout_seconds=30
            ) as client,
        ):
            listed = sorted(t.name for t in (await client.list_tools()).tools)
            found = await client.call_tool("search_tools", {"query": f"note number {n % 3}"})
            names = [r["name"] for r in found.structured_content["results"]]
            return client.session.protocol_version, listed, names

    async def everyone() -> list[tuple[str, list[str], list[str]]]:
        return await asyncio.gather(*(session(m, n) for m in ("auto", "legacy") for n in range(10)))

    results = asyncio.run(asyncio.wait_for(everyone(), timeout=120))
    modern_runs, legacy_runs = results[:10], results[10:]
    assert {r[0] for r in modern_runs} == {MODERN}
    assert {r[0] for r in legacy_runs} == {"2025-11-25"}
    for a, b in zip(modern_runs, legacy_runs, strict=True):
        assert a[1:] == b[1:]
