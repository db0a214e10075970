"""One nesting limit at the parser of every face, in process: an admin body
and a runner's arguments nested too deep are refused naming the problem, and audited.

Moved from tests/e2e/test_hostile_protocol.py, which keeps the faces a process is needed
for (the legacy SSE stream, ``toolspoke stdio``).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from appliance.rpc.jsonrpc import MAX_DEPTH
from tests.support.inprocess import InProcess, served_in_process
from tests.support.nesting import arrays, assert_nesting_refused, audit_rows, deep_call, session

pytestmark = pytest.mark.inprocess


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    with served_in_process(tmp_path_factory.mktemp("nesting") / "data") as served:
        yield served


@pytest.fixture
def http(app: InProcess) -> Iterator[httpx.Client]:
    with app.mcp_client() as client:
        yield client


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 990, 1020, 5000])
def test_a_deeply_nested_admin_body_is_a_400_naming_the_problem(http: httpx.Client, depth: int) -> None:
    body = '{"name": "deep", "is_admin": ' + arrays(depth) + "}"
    answer = http.post("/api/v1/users", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["reason"], error["field"]) == ("invalid_request", "body")
    assert f"deeper than {MAX_DEPTH} levels" in error["message"]
    assert "deep" not in {u["name"] for u in http.get("/api/v1/users").json()["users"]}


@pytest.mark.parametrize("path", ["/mcp", "/mcp/demo"])
@pytest.mark.parametrize("depth", [MAX_DEPTH, 990])
def test_a_runner_with_deeply_nested_arguments_is_refused_and_audited(
    app: InProcess, http: httpx.Client, path: str, depth: int
) -> None:
    headers = session(http, path)
    name = "use_tool" if path == "/mcp" else "listNotes"
    before = audit_rows(app)
    answer = http.post(path, content=deep_call(name, depth), headers=headers)
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    assert doc["id"] == 7
    assert_nesting_refused(doc["error"], -32602, "params")
    # A tools/call refused for its shape leaves its row, as any other refused call does.
    assert audit_rows(app)[len(before) :] == [(name, "use_tool" if name == "use_tool" else None, "invalid")]
    # A deep notification has nothing to answer with a result: the message itself is refused.
    note = '{"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": ' + arrays(depth) + "}}"
    refused = http.post(path, content=note, headers=headers)
    assert refused.status_code == 400
    assert_nesting_refused(refused.json()["error"], -32600, "message")
    # The session still serves.
    ping = http.post(path, json={"jsonrpc": "2.0", "id": 8, "method": "ping"}, headers=headers)
    assert ping.json() == {"jsonrpc": "2.0", "id": 8, "result": {}}
