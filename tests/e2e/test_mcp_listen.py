"""2026-07-28 upstreams announce tool changes on a ``subscriptions/listen`` stream the gateway opens.

A real appliance, a real SDK upstream (``tests/support/dynamic_upstream.py``, mcp 2.x, which
serves ``subscriptions/listen`` and declares ``tools.listChanged`` at 2026-07-28) whose tool
set the test changes, and the official SDK client through the bridge. The upstream writes the
number of listen streams it has open to ``LISTEN_FILE``: that is how the test knows the
gateway is listening (and stopped listening) without looking inside the appliance.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_mcp_resync import DYNAMIC, admin, import_mcp, ok, outcome, run
from tests.support.clients import connect
from tests.support.peers import free_port, peer
from tests.support.servers import Appliance, cli, running_appliance

pytestmark = pytest.mark.e2e


def wait_for(what: str, check: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        threading.Event().wait(0.05)


def listens(path: Path) -> int:
    """Listen streams the upstream has open (-1: it never had one)."""
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return -1


def call(app: Appliance, runner: str, tool: str, args: dict[str, Any]) -> tuple[bool, str]:
    async def scenario() -> tuple[bool, str]:
        async with connect(app) as client:
            return await outcome(client, runner, {"tool": tool, "input": args})

    return tuple(run(scenario()))  # type: ignore[return-value]


def pending_names(app: Appliance, slug: str) -> list[str]:
    with admin(app) as api:
        return [p["name"] for p in ok(api.get(f"/toolkits/{slug}/pending"))["pending"]]


def test_a_2026_upstream_s_tools_list_changed_on_its_listen_stream_resyncs_the_toolkit(
    tmp_path: Path,
) -> None:
    port, control, listen_file = free_port(), tmp_path / "toolset.json", tmp_path / "listens"
    control.write_text(json.dumps({"tools": ["alpha", "mutate"]}))
    argv = [sys.executable, str(DYNAMIC), "--port", str(port)]
    env = {"TOOLSET_FILE": str(control), "LISTEN_FILE": str(listen_file)}
    with (
        running_appliance(tmp_path / "data") as app,
        peer(argv, port, tmp_path / "upstream.log", env=env),
    ):
        import_mcp(app, f"http://127.0.0.1:{port}/mcp", "live")
        assert listens(listen_file) == -1  # the import's own session is not pooled: no stream
        # The first call pools the session; the upstream is modern and declares listChanged.
        assert call(app, "use_tool", "live__alpha", {"text": "a"}) == (False, "alpha:a")
        wait_for("the gateway's listen stream", lambda: listens(listen_file) == 1)

        # The notice rides the listen stream only (the SDK drops it on a 2026 call's stream).
        assert call(app, "run_tool", "live__mutate", {"tools": ["beta", "mutate"]}) == (False, "changed")
        wait_for("the background re-sync", lambda: pending_names(app, "live") == ["live__beta"])
        line = "re-sync of default.live (tools/list_changed): 1 added"
        wait_for("the re-sync's log line", lambda: line in "".join(app.output))
        with admin(app) as api:
            report = ok(api.post("/toolkits/live/sync"))  # alpha was disabled by that re-sync
            assert report["removed"] == [] and report["pending"] == ["live__beta"]
            assert listens(listen_file) == 1  # still one stream, not one per request
            assert ok(api.delete("/toolkits/live"))["deleted"] == "live"
        wait_for("the listen stream to close with the toolkit", lambda: listens(listen_file) == 0)


# Longer than the suite's 30 s: the gateway re-listens with a back-off doubling from 1 s
# (mcpclient/listen.py) while the upstream restarts, and the test waits that out (up to
# 30 s for the reopened stream); that back-off is the behaviour under test.
@pytest.mark.timeout(75)
def test_a_broken_listen_stream_is_reopened_and_the_toolkit_resynced_for_what_it_missed(
    tmp_path: Path,
) -> None:
    port, control, listen_file = free_port(), tmp_path / "toolset.json", tmp_path / "listens"
    control.write_text(json.dumps({"tools": ["alpha"]}))
    argv = [sys.executable, str(DYNAMIC), "--port", str(port)]
    env = {"TOOLSET_FILE": str(control), "LISTEN_FILE": str(listen_file)}
    with running_appliance(tmp_path / "data") as app:
        with peer(argv, port, tmp_path / "upstream1.log", env=env):
            import_mcp(app, f"http://127.0.0.1:{port}/mcp", "flaky")
            assert call(app, "use_tool", "flaky__alpha", {"text": "a"}) == (False, "alpha:a")
            wait_for("the first listen stream", lambda: listens(listen_file) == 1)
        # Down: the stream breaks. Changed while nobody listened (no notice will ever come).
        listen_file.unlink()
        control.write_text(json.dumps({"tools": ["alpha", "gamma"]}))
        with peer(argv, port, tmp_path / "upstream2.log", env=env):
            # Back: re-listened with back-off on the same session, then re-synced once.
            wait_for("the listen stream to be reopened", lambda: listens(listen_file) == 1, timeout=30)
            wait_for("the catch-up re-sync", lambda: pending_names(app, "flaky") == ["flaky__gamma"])
            wait_for("the break's log line", lambda: "the listen stream broke" in "".join(app.output))


def test_a_listen_stream_does_not_keep_an_idle_stdio_child_running(tmp_path: Path) -> None:
    # The control files lie in the toolkit's work directory: a sandboxed stdio server
    # (children/sandbox.py) can see and write nothing else.
    workdir = tmp_path / "data" / "stdio" / "default.quiet"
    workdir.mkdir(parents=True)
    control, listen_file = workdir / "toolset.json", workdir / "listens"
    control.write_text(json.dumps({"tools": ["alpha"]}))
    env = {"TOOLSPOKE_STDIO_IDLE_S": "2"}
    with running_appliance(tmp_path / "data", env=env) as app:
        done = cli(
            app.data_dir,
            "import",
            "mcp",
            "--json",
            "--slug",
            "quiet",
            "--env",
            f"TOOLSET_FILE={control}",
            "--env",
            f"LISTEN_FILE={listen_file}",
            "--",
            sys.executable,
            str(DYNAMIC),
            "--stdio",
        )
        assert done.returncode == 0, done.stderr
        assert call(app, "use_tool", "quiet__alpha", {"text": "a"}) == (False, "alpha:a")
        wait_for("the stdio child's listen stream", lambda: listens(listen_file) == 1)
        # The open listen request is not traffic: the child still stops when idle.
        wait_for(
            "the idle stdio child to stop",
            lambda: "stdio default.quiet: no traffic for 2s, stopping" in "".join(app.output),
        )
        # It is not restarted to listen; the next call starts it, and it listens again.
        listen_file.unlink()
        assert call(app, "use_tool", "quiet__alpha", {"text": "b"}) == (False, "alpha:b")
        wait_for("a listen stream on the new child", lambda: listens(listen_file) == 1)
