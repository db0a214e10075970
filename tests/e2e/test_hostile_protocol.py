"""Hostile protocol input on a real ``toolspoke serve`` and ``toolspoke stdio``: deep nesting on
every face, doubled Host and Origin headers (sent on a raw socket: HTTP clients merge or refuse
them), a body over the size limit, a Host not served here, a search query over its limit.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from appliance.search.text import MAX_QUERY_CHARS
from tests.support.nesting import INIT, LEGACY, assert_nesting_refused, audit_rows, deep_call
from tests.support.servers import REPO, Appliance, cli, running_appliance

pytestmark = pytest.mark.e2e
LIMIT_BYTES = 65_536


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    env = {"TOOLSPOKE_MAX_REQUEST_BYTES": str(LIMIT_BYTES)}
    with running_appliance(tmp_path_factory.mktemp("hostile") / "data", env=env) as running:
        yield running


@pytest.fixture
def http(app: Appliance) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {app.key}", "Accept": "application/json, text/event-stream"}
    with httpx.Client(base_url=app.base_url, headers=headers, timeout=httpx.Timeout(30, read=20)) as client:
        yield client


# -- item 7: one nesting limit at the parser of every face (more: tests/rpc/test_nesting.py)


def test_a_deeply_nested_message_on_the_legacy_sse_face_is_refused_on_its_stream(
    app: Appliance, http: httpx.Client
) -> None:
    with http.stream("GET", "/sse") as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()

        def event() -> dict[str, Any]:
            data = []
            for line in lines:
                if line.startswith("data:"):
                    data.append(line.removeprefix("data:").strip())
                elif line == "" and data:
                    return dict(json.loads("\n".join(data)))
            raise AssertionError("stream ended")

        endpoint = next(line for line in lines if line.startswith("data:")).removeprefix("data:").strip()
        assert http.post(endpoint, json=INIT).status_code == 202
        assert event()["result"]["protocolVersion"] == LEGACY
        before = audit_rows(app)
        posted = http.post(
            endpoint, content=deep_call("use_tool", 990), headers={"Content-Type": "application/json"}
        )
        assert posted.status_code == 202
        reply = event()
        assert reply["id"] == 7
        assert_nesting_refused(reply["error"], -32602, "params")
        assert audit_rows(app)[len(before) :] == [("use_tool", "use_tool", "invalid")]


def test_a_deeply_nested_line_on_stdio_is_answered_and_the_next_is_served(app: Appliance) -> None:
    lines = [
        json.dumps(INIT),
        deep_call("use_tool", 990, request_id=2),
        json.dumps({**INIT, "id": 3, "method": "ping"}),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "appliance", "stdio"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        input="\n".join(lines) + "\n",
        check=False,
        env={"PATH": "/usr/bin:/bin", "TOOLSPOKE_DATA_DIR": str(app.data_dir), "TOOLSPOKE_API_KEY": app.key},
    )
    answers = {doc["id"]: doc for doc in map(json.loads, done.stdout.splitlines())}
    assert set(answers) == {1, 2, 3}, done.stdout + done.stderr
    assert_nesting_refused(answers[2]["error"], -32602, "params")
    assert answers[3]["result"] == {}
    assert "Traceback" not in done.stderr


# -- item 8: a doubled Host or Origin header is refused on every route ------------------------

ROUTES = [
    ("POST", "/mcp", True),
    ("POST", "/mcp/demo", True),
    ("GET", "/sse", True),
    ("POST", "/messages?session_id=x", True),
    ("GET", "/api/v1/me", False),
    ("GET", "/health", False),
    ("GET", "/healthz", False),
]


def raw(app: Appliance, method: str, path: str, headers: list[tuple[str, str]]) -> tuple[int, dict[str, Any]]:
    """One request written by hand on a socket (headers exactly as given, duplicates kept)."""
    url = httpx.URL(app.base_url)
    body = json.dumps(INIT).encode() if method == "POST" else b""
    head = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers)]
    head += [f"Authorization: Bearer {app.key}", "Accept: application/json, text/event-stream"]
    head += ["Content-Type: application/json", f"Content-Length: {len(body)}", "Connection: close"]
    with socket.create_connection((url.host, url.port), timeout=20) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    status_line, _, rest = received.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(payload) if payload.startswith(b"{") else {}


@pytest.mark.parametrize(("method", "path", "rpc"), ROUTES)
@pytest.mark.parametrize("header", ["Origin", "Host"])
def test_a_doubled_origin_or_host_header_is_refused_on_every_route(
    app: Appliance, method: str, path: str, rpc: bool, header: str
) -> None:
    host = httpx.URL(app.base_url).netloc.decode()
    if header == "Origin":
        headers = [("Host", host), ("Origin", "http://127.0.0.1"), ("Origin", "https://evil.example")]
    else:
        headers = [("Host", host), ("Host", "evil.example")]
    status, doc = raw(app, method, path, headers)
    assert status == 400, doc
    if rpc:
        error = doc["error"]
        assert (error["code"], error["data"]["field"]) == (-32600, header.lower())
    else:
        error = doc["error"]
        assert (error["reason"], error["field"]) == ("invalid_request", header.lower())
    assert f"more than one {header} header" in error["message"]


def test_one_loopback_origin_still_passes(app: Appliance) -> None:
    host = httpx.URL(app.base_url).netloc.decode()
    status, doc = raw(app, "POST", "/mcp", [("Host", host), ("Origin", "http://127.0.0.1")])
    assert status == 200 and doc["result"]["protocolVersion"] == LEGACY


# -- item 9: the size limit stated (a misdirected Host: tests/web/test_guards.py) ----------


def test_a_body_over_the_limit_is_a_413_stating_the_limit(http: httpx.Client) -> None:
    big = json.dumps({**INIT, "params": {**INIT["params"], "pad": "x" * LIMIT_BYTES}})
    for path in ("/mcp", "/mcp/demo"):
        answer = http.post(path, content=big, headers={"Content-Type": "application/json"})
        assert answer.status_code == 413
        doc = answer.json()
        assert doc["jsonrpc"] == "2.0" and doc["id"] is None
        error = doc["error"]
        assert (error["code"], error["data"]["limit_bytes"]) == (-32600, LIMIT_BYTES)
        assert f"{LIMIT_BYTES} bytes" in error["message"]
    answer = http.post("/api/v1/users", content=big, headers={"Content-Type": "application/json"})
    assert answer.status_code == 413
    error = answer.json()["error"]
    assert error["reason"] == "body_too_large" and f"{LIMIT_BYTES} bytes" in error["message"]


# -- item 2: the search query limit on the CLI ------------------------------------------------


def test_toolspoke_search_refuses_a_query_over_the_limit_naming_it(app: Appliance) -> None:
    done = cli(app.data_dir, "search", "A" * (MAX_QUERY_CHARS + 1))
    assert done.returncode != 0
    assert "query" in done.stderr and f"the limit is {MAX_QUERY_CHARS} characters" in done.stderr
    assert "Traceback" not in done.stderr
    assert cli(app.data_dir, "search", "A" * MAX_QUERY_CHARS).returncode == 0
