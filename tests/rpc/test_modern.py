"""The stateless 2026-07-28 revision on /mcp: the wire rules (envelope, routing headers,
status codes), in process (tests/support/inprocess.py).

Moved from tests/e2e/test_mcp_modern.py, which keeps the official SDK's end-to-end run on a
real ``toolspoke serve``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.inprocess import InProcess, served_in_process

pytestmark = pytest.mark.inprocess
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    with served_in_process(tmp_path_factory.mktemp("modern") / "data") as served:
        yield served


@pytest.fixture
def http(app: InProcess) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {app.key}", "Accept": "application/json, text/event-stream"}
    with app.client(headers=headers, timeout=30) as client:
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


def test_a_duplicated_routing_header_is_refused(app: InProcess) -> None:
    raw = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}})
    headers = [
        ("Authorization", f"Bearer {app.key}"),
        ("Content-Type", "application/json"),
        ("Accept", "application/json"),
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", "tools/list"),
        ("Mcp-Method", "tools/call"),
    ]
    r = app.client().post(app.mcp_url, content=raw, headers=headers, timeout=10)
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
