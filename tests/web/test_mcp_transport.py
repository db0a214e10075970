"""The /mcp endpoint (web/mcp.py) over raw HTTP: the transport rules a real client relies
on, in process (tests/support/inprocess.py), with plain httpx, so that each rule of the
streamable HTTP transport and of the error contract is checked on the answer.

Moved from tests/e2e/test_mcp_transport.py, which keeps the path on a real ``toolspoke
serve``: a session's life over the socket and the body cap Sanic's own server enforces.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.clients import INIT
from tests.support.inprocess import InProcess, served_in_process

pytestmark = pytest.mark.inprocess


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    with served_in_process(tmp_path_factory.mktemp("transport") / "data") as served:
        yield served


@pytest.fixture
def http(app: InProcess) -> Iterator[httpx.Client]:
    with app.mcp_client() as client:
        client.headers["Content-Type"] = "application/json"
        yield client


def _session(http: httpx.Client, version: str = "2025-11-25") -> dict[str, str]:
    body = {**INIT, "params": {**INIT["params"], "protocolVersion": version}}
    r = http.post("/mcp", json=body)
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    assert (
        http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={"Mcp-Session-Id": sid},
        ).status_code
        == 202
    )
    return {"Mcp-Session-Id": sid, "MCP-Protocol-Version": r.json()["result"]["protocolVersion"]}


def _rpc(
    http: httpx.Client,
    headers: dict[str, str],
    method: str,
    params: dict[str, Any] | None = None,
    msg_id: Any = 7,
) -> httpx.Response:
    return http.post(
        "/mcp",
        headers=headers,
        json={"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params or {}},
    )


def test_initialize_negotiates_the_requested_version_and_issues_a_session(http: httpx.Client) -> None:
    for version in ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"):
        body = {**INIT, "params": {**INIT["params"], "protocolVersion": version}}
        r = http.post("/mcp", json=body)
        assert r.json()["result"]["protocolVersion"] == version
        sid = r.headers["mcp-session-id"]
        assert sid.isascii() and all(0x21 <= ord(c) <= 0x7E for c in sid) and len(sid) >= 32


def test_an_unknown_version_is_answered_with_the_latest_supported(http: httpx.Client) -> None:
    r = http.post("/mcp", json={**INIT, "params": {**INIT["params"], "protocolVersion": "1999-01-01"}})
    assert r.json()["result"]["protocolVersion"] == "2025-11-25"


def test_tools_list_shows_only_the_bridge_tools(http: httpx.Client) -> None:
    tools = _rpc(http, _session(http), "tools/list").json()["result"]["tools"]
    names = {t["name"] for t in tools}
    assert names == {
        "search_tools",
        "list_toolkits",
        "describe_tools",
        "read_guide",
        "read_result",
        "use_tool",
        "run_tool",
        "run_destructive_tool",
    }
    by_name = {t["name"]: t for t in tools}
    assert by_name["use_tool"]["annotations"]["readOnlyHint"] is True
    assert by_name["run_destructive_tool"]["annotations"]["destructiveHint"] is True
    assert by_name["run_tool"]["annotations"]["destructiveHint"] is False


def test_a_request_without_a_key_gets_401_with_a_bearer_challenge(app: InProcess) -> None:
    anonymous = app.client(timeout=10)
    r = anonymous.post("/mcp", json=INIT, headers={"Accept": "application/json"})
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    r = anonymous.post("/mcp", json=INIT, headers={"Authorization": "Bearer tsk_wrong"})
    assert r.status_code == 401


def test_a_foreign_origin_gets_403_and_a_loopback_origin_is_served(http: httpx.Client) -> None:
    assert http.post("/mcp", json=INIT, headers={"Origin": "https://evil.example"}).status_code == 403
    assert http.post("/mcp", json=INIT, headers={"Origin": "http://localhost:3000"}).status_code == 200


def test_a_rebinding_host_header_gets_421(http: httpx.Client) -> None:
    assert http.post("/mcp", json=INIT, headers={"Host": "attacker.example"}).status_code == 421


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"",
        b'{"jsonrpc":"2.0","id":1,"method":"ping"} trailing',
        b"\xef\xbb\xbf{}",
        b'{"a": NaN}',
        b"\xff\xfe",
    ],
)
def test_a_body_that_is_not_json_gets_400_and_parse_error(http: httpx.Client, body: bytes) -> None:
    r = http.post("/mcp", content=body)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == -32700
    assert r.json()["id"] is None


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ([], "batch"),
        ([INIT, INIT], "batch"),
        (42, "message"),
        ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, "jsonrpc"),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, "method"),
        ({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": []}, "params"),
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, "id"),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, "id"),
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, "id"),
    ],
)
def test_an_invalid_request_gets_32600_naming_the_member(http: httpx.Client, doc: Any, field: str) -> None:
    r = http.post("/mcp", content=orjson.dumps(doc))
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == -32600
    assert err["data"]["field"] == field


def test_a_valid_id_is_echoed_on_an_invalid_request(http: httpx.Client) -> None:
    r = http.post("/mcp", json={"jsonrpc": "1.0", "id": "abc", "method": "ping"})
    assert r.json()["id"] == "abc"


def test_an_unknown_method_gets_32601_naming_it(http: httpx.Client) -> None:
    r = _rpc(http, _session(http), "tools/explode")
    assert r.json()["error"]["code"] == -32601
    assert "tools/explode" in r.json()["error"]["message"]


def test_requests_need_a_live_session(http: httpx.Client) -> None:
    r = _rpc(http, {}, "tools/list")
    assert r.status_code == 400
    assert r.json()["error"]["data"]["field"] == "mcp-session-id"
    assert _rpc(http, {"Mcp-Session-Id": "no-such-session"}, "tools/list").status_code == 404


def test_delete_ends_a_session_and_later_requests_get_404(http: httpx.Client) -> None:
    headers = _session(http)
    assert http.delete("/mcp", headers=headers).status_code == 204
    assert _rpc(http, headers, "ping").status_code == 404
    assert http.delete("/mcp", headers=headers).status_code == 404


def test_a_session_is_useless_with_another_key(app: InProcess, http: httpx.Client) -> None:
    headers = _session(http)
    r = app.client(timeout=10).post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers={**headers, "Authorization": "Bearer tsk_someone-else-entirely-000000000000"},
    )
    assert r.status_code == 401


def test_an_unsupported_protocol_version_header_gets_400(http: httpx.Client) -> None:
    headers = {**_session(http), "MCP-Protocol-Version": "1999-01-01"}
    r = _rpc(http, headers, "ping")
    assert r.status_code == 400


def test_notifications_get_202_with_no_body(http: httpx.Client) -> None:
    headers = _session(http)
    r = http.post(
        "/mcp",
        headers=headers,
        json={"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}},
    )
    assert r.status_code == 202
    assert r.content == b""


def test_a_client_that_accepts_only_sse_gets_one_sse_event(http: httpx.Client) -> None:
    headers = {**_session(http), "Accept": "text/event-stream"}
    r = _rpc(http, headers, "ping", msg_id="p1")
    assert r.headers["content-type"].startswith("text/event-stream")
    data = [line[5:].strip() for line in r.text.splitlines() if line.startswith("data:")]
    assert orjson.loads(data[0]) == {"jsonrpc": "2.0", "id": "p1", "result": {}}


def test_get_offers_no_standalone_stream_405(http: httpx.Client) -> None:
    assert http.get("/mcp", headers={"Accept": "text/event-stream"}).status_code == 405


def test_a_wrong_content_type_gets_415(http: httpx.Client) -> None:
    r = http.post("/mcp", content=orjson.dumps(INIT), headers={"Content-Type": "text/plain"})
    assert r.status_code == 415


def test_tools_call_envelope_errors_name_the_member(http: httpx.Client) -> None:
    headers = _session(http)
    assert _rpc(http, headers, "tools/call", {"arguments": {}}).json()["error"]["data"]["field"] == "name"
    r = _rpc(http, headers, "tools/call", {"name": "search_tools", "arguments": [1]})
    assert r.json()["error"]["data"]["field"] == "arguments"
    r = _rpc(http, headers, "tools/call", {"name": "nope__nothing", "arguments": {}})
    assert r.json()["error"]["code"] == -32602
    assert "nope__nothing" in r.json()["error"]["message"]


def test_no_error_carries_a_traceback(http: httpx.Client) -> None:
    """I-7: no client-visible error carries a traceback."""
    headers = _session(http)
    lone_surrogate = (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_tools",'
        b'"arguments":{"query":"\\ud800"}}}'
    )
    assert http.post("/mcp", headers=headers, content=lone_surrogate).json()["error"]["code"] == -32700
    for params in (
        {"name": "search_tools", "arguments": {"query": "x" * 100_000}},
        {"name": "describe_tools", "arguments": {"names": ["x" * 5000]}},
        {"name": "use_tool", "arguments": {"tool": "a" * 10000}},
    ):
        text = _rpc(http, headers, "tools/call", params).text
        assert "Traceback" not in text and ".py" not in text


def test_data_dir_holds_the_database_and_a_private_master_key(app: InProcess) -> None:
    key = Path(app.data_dir) / "master.key"
    assert (Path(app.data_dir) / "toolspoke.db").exists()
    assert key.stat().st_mode & 0o777 == 0o600
