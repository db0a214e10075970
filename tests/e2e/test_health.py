"""Upstream health end to end: a real appliance probing a real MCP server that stops and returns.

The upstream (``tests/support/upstream_server.py``, streamable HTTP) sits behind a tiny
recording proxy, because the server itself keeps no log of what it was sent: the proxy
records the JSON-RPC method of every message, so the test can show that probes sent only
``ping``/``server/discover`` (and handshakes), never ``tools/call``. "Stopping the upstream"
stops both the server and the proxy; both come back on the same ports.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.clients import connect
from tests.support.peers import UPSTREAM, free_port, peer
from tests.support.servers import Appliance, cli, running_appliance

pytestmark = pytest.mark.e2e
HANGING = Path(__file__).resolve().parents[1] / "support" / "hanging_stdio.py"
HEALTH_ENV = {
    "TOOLSPOKE_HEALTH_INTERVAL_S": "0.2",
    "TOOLSPOKE_HEALTH_TIMEOUT_S": "2",
    "TOOLSPOKE_HEALTH_DEGRADED_AFTER": "2",
    "TOOLSPOKE_HEALTH_BROKEN_AFTER": "4",
    "TOOLSPOKE_HEALTH_RECOVER_AFTER": "2",
}
# What a probe (or an import, or the pool opening a session, with its 2026-07-28 listen
# stream) may send; tools/call never.
HANDSHAKES = {
    "server/discover",
    "initialize",
    "notifications/initialized",
    "ping",
    "tools/list",
    "subscriptions/listen",
}
_HOP_HEADERS = {"host", "connection", "content-length", "transfer-encoding", "keep-alive"}


@contextmanager
def recording_proxy(port: int, upstream_port: int, methods: list[str]) -> Iterator[None]:
    """Forward HTTP to ``upstream_port`` and append each JSON-RPC method to ``methods``.

    Needs an upstream answering plain JSON (``--json-response``): bodies are read whole.
    """

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if body:
                with_method = json.loads(body)
                if isinstance(with_method, dict) and "method" in with_method:
                    methods.append(str(with_method["method"]))
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
            conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=10)
            try:
                conn.request(self.command, self.path, body=body or None, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
            except OSError:
                self.close_connection = True  # a dead upstream: drop the connection, like it would
                return
            finally:
                conn.close()
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in _HOP_HEADERS:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_POST = do_GET = do_DELETE = _forward

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextmanager
def upstream(port: int, proxy_port: int, logs: Path, methods: list[str]) -> Iterator[None]:
    argv = [sys.executable, str(UPSTREAM), "--transport", "streamable-http", "--port", str(port)]
    with peer([*argv, "--json-response"], port, logs), recording_proxy(proxy_port, port, methods):
        yield


def admin(app: Appliance, method: str, path: str) -> Any:
    request = urllib.request.Request(
        app.base_url + path, method=method, headers={"Authorization": f"Bearer {app.key}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def health_of(app: Appliance, slug: str) -> dict[str, Any]:
    rows = admin(app, "GET", "/api/v1/health/toolkits")["toolkits"]
    return dict(next(r for r in rows if r["slug"] == slug))


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)


def logged(line: str, app: Appliance) -> None:
    wait_for(repr(line), lambda: line in "".join(app.output), timeout=10)


def call(app: Appliance, name: str, arguments: dict[str, Any]) -> Any:
    async def scenario() -> Any:
        async with connect(app) as client:
            return await client.call_tool(name, arguments)

    return asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_a_stopped_upstream_turns_degraded_then_broken_refuses_calls_at_once_and_recovers(
    tmp_path: Path,
) -> None:
    """UP-11: a real appliance: degraded, broken with a reason, refused at once, then recovery."""
    port, proxy_port = free_port(), free_port()
    methods: list[str] = []
    with running_appliance(tmp_path / "data", env=HEALTH_ENV) as app:
        with upstream(port, proxy_port, tmp_path / "up1.log", methods):
            done = cli(
                app.data_dir,
                "import",
                "mcp",
                "--json",
                f"http://127.0.0.1:{proxy_port}/mcp",
                "--slug",
                "hup",
                env={"ALLOWED_TOOL_CIDRS": "127.0.0.1/32"},
            )
            assert done.returncode == 0, done.stderr
            assert call(app, "hup__add", {"a": 2, "b": 3}).is_error is False
            # Let several probe rounds reach the live upstream.
            wait_for("probes", lambda: sum(m in ("ping", "server/discover") for m in methods) >= 6)
            assert health_of(app, "hup")["health"] == "active"
            assert health_of(app, "demo")["health"] == "active"  # OpenAPI: DNS + TCP connect

        wait_for("broken", lambda: health_of(app, "hup")["health"] == "broken")
        # Log lines are written by a thread a moment after the transition they report.
        logged("health default.hup: active -> degraded", app)
        logged("health default.hup: degraded -> broken", app)
        row = health_of(app, "hup")
        assert "4 checks in a row failed" in row["reason"] and row["since"]

        started = time.monotonic()
        refused = call(app, "hup__add", {"a": 1, "b": 1})
        assert time.monotonic() - started < 5  # at once, not after the 30 s upstream deadline
        assert refused.is_error is True
        assert refused.meta["toolspoke/reason"] == "upstream_broken"
        assert "'hup'" in refused.content[0].text and "broken" in refused.content[0].text
        listed = call(app, "list_toolkits", {}).structured_content["toolkits"]
        assert next(k for k in listed if k["toolkit"] == "hup")["health"] == "broken"
        probed = admin(app, "POST", "/api/v1/toolkits/hup/probe")
        assert probed["probed"] is True and probed["health"] == "broken"

        with upstream(port, proxy_port, tmp_path / "up2.log", methods):
            wait_for("active again", lambda: health_of(app, "hup")["health"] == "active")
            logged("health default.hup: broken -> active", app)
            assert call(app, "hup__add", {"a": 4, "b": 5}).structured_content == {"result": 9}
            assert admin(app, "POST", "/api/v1/toolkits/hup/probe")["health"] == "active"

    # Exactly the two calls the test made reached the upstream; everything else was probing.
    assert methods.count("tools/call") == 2
    assert set(methods) - {"tools/call"} <= HANDSHAKES, set(methods)


def import_hanging(app: Appliance, slug: str) -> None:
    """Import ``tests/support/hanging_stdio.py`` as a stdio toolkit and call it once (it runs)."""
    done = cli(app.data_dir, "import", "mcp", "--json", "--slug", slug, "--", sys.executable, str(HANGING))
    assert done.returncode == 0, done.stderr
    assert call(app, "use_tool", {"tool": f"{slug}__hello", "input": {}}).content[0].text == "hello: ok"


def test_a_running_but_silent_stdio_child_turns_broken_and_a_fresh_one_brings_it_back(
    tmp_path: Path,
) -> None:
    """UP-09 / UP-11: a hung stdio child is broken and recycled; a fresh one recovers."""
    env = {**HEALTH_ENV, "TOOLSPOKE_HEALTH_TIMEOUT_S": "0.5"}
    with running_appliance(tmp_path / "data", env=env) as app:
        import_hanging(app, "hang")
        assert health_of(app, "hang")["health"] == "active"

        frozen = call(app, "use_tool", {"tool": "hang__freeze", "input": {}})
        assert frozen.content[0].text == "freeze: ok"  # its last answer; the process runs on
        wait_for("broken", lambda: health_of(app, "hang")["health"] == "broken")
        logged("health default.hang: active -> degraded", app)
        assert "did not answer a ping" in health_of(app, "hang")["reason"]
        refused = call(app, "use_tool", {"tool": "hang__hello", "input": {}})
        assert refused.is_error is True and refused.meta["toolspoke/reason"] == "upstream_broken"

        # Still silent once broken: the probes stop it and start a fresh child, which answers.
        wait_for("active again", lambda: health_of(app, "hang")["health"] == "active")
        assert call(app, "use_tool", {"tool": "hang__hello", "input": {}}).content[0].text == "hello: ok"


def _children_running(app: Appliance, script: Path) -> list[int]:
    """Pids of the appliance's children whose command line names ``script``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # it ended while we looked
        if ppid == app.proc.pid and str(script).encode() in argv:
            found.append(int(entry.name))
    return found


def test_pings_to_a_running_stdio_child_do_not_keep_it_from_stopping_when_idle(tmp_path: Path) -> None:
    env = {**HEALTH_ENV, "TOOLSPOKE_STDIO_IDLE_S": "1.5"}
    with running_appliance(tmp_path / "data", env=env) as app:
        import_hanging(app, "idle")
        assert _children_running(app, HANGING)
        # Probes ping it every 0.2 s; none of that is traffic, so it stops after 1.5 s idle.
        wait_for("the idle child to stop", lambda: not _children_running(app, HANGING), timeout=20)
        logged("stdio default.idle: no traffic for 1.5s, stopping", app)
        assert health_of(app, "idle")["health"] == "active"
