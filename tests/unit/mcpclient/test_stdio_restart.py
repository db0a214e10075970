"""A crashed stdio server is restarted by the first call after the crash (README: "restarted
after a crash"), whatever the interleaving of the exit, its notice and the call, on both loops.

A flaky e2e run once answered the call right after a SIGKILL with ``upstream_unavailable``,
"retry in 0.0s": the pool slept the back-off's rounded ``retry_after_s`` (and uvloop's timers
may fire a moment early), tried once more and refused. The cases here force the interleavings
instead of hoping for them: the call is made with no pause after the kill, with the exit not yet
delivered to the loop, and repeated so that the rounding and early timers are met.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from appliance import config
from appliance.children.processes import ProcessRegistry, State, StdioPolicy, StdioProcess
from appliance.egress.transport import Egress
from appliance.mcpclient.pool import McpPool
from tests.support import tiny_stdio
from tests.support.loops import LOOPS, LoopFactory, run_on


class LaggingClock:
    """The supervisor's clock, 10% slower than the loop's: every timer the pool sets for a
    back-off fires a moment before the back-off is over by the supervisor's reckoning, as a
    uvloop timer (millisecond resolution, a cached "now") or a rounded ``retry_after_s`` may."""

    def __init__(self) -> None:
        self.origin = time.monotonic()

    def __call__(self) -> float:
        return self.origin + (time.monotonic() - self.origin) * 0.9


def _pool(tmp_path: Path, clock: Callable[[], float] = time.monotonic, **policy: Any) -> McpPool:
    values: dict[str, Any] = {
        "workdir_root": tmp_path / "stdio",
        "base_env": {"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        "close_grace_s": 1.0,
        "term_grace_s": 1.0,
        # Every child lives "long enough", so each crash starts the back-off afresh at its
        # first step, which the call must wait out (not refuse).
        "stable_after_s": 0.0,
        "backoff_initial_s": 0.05,
    }
    values.update(policy)
    settings = config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path / "data")})
    registry = ProcessRegistry(StdioPolicy(**values), clock=clock)
    return McpPool(Egress(settings), registry, stdio_start_timeout_s=10)


async def _call(pool: McpPool, connection: dict[str, Any]) -> int:
    result = await pool.call_tool("k", connection, "who", {}, timeout_s=10)
    return int(result["structuredContent"]["pid"])


def _wait_until_exited(pid: int) -> None:
    """Block until ``pid`` has exited, without reaping it (``WNOWAIT``) and without letting
    the event loop run: its pidfd callback cannot have run, so the supervisor does not know."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


async def _crash_recorded(process: StdioProcess) -> None:
    """Until the supervisor has recorded the crash (bounded by the caller's timeout)."""
    while process.state is not State.CRASHED:
        await asyncio.sleep(0.001)


@pytest.mark.parametrize("factory", LOOPS)
def test_a_call_made_as_soon_as_the_crash_is_recorded_restarts_the_server(
    tmp_path: Path, factory: LoopFactory
) -> None:
    """Kill; the moment the supervisor has recorded the crash (its back-off just begun), call;
    15 times. Each call waits the short back-off out and is answered by a new child. Before the
    fix each was refused "retry in 0.0s": the pool slept ``retry_after_s`` once, tried again
    a moment before the back-off ended by the supervisor's clock, and gave up."""

    async def main() -> None:
        pool, connection = _pool(tmp_path, LaggingClock()), tiny_stdio.connection()
        try:
            pid = await _call(pool, connection)
            process = pool.processes.get("k")
            assert process is not None
            seen = {pid}
            for _ in range(15):
                os.kill(pid, signal.SIGKILL)
                async with asyncio.timeout(10):
                    await _crash_recorded(process)
                pid = await _call(pool, connection)
                assert pid not in seen
                seen.add(pid)
        finally:
            await pool.aclose()

    run_on(factory, main(), 120)


@pytest.mark.parametrize("factory", LOOPS)
def test_a_call_that_finds_the_child_dead_before_the_loop_noticed_restarts_it(
    tmp_path: Path, factory: LoopFactory
) -> None:
    """The child has exited but the loop has not run since: the pooled session still looks
    open. The call must not be written to the dead child (and fail); it restarts the server."""

    async def main() -> None:
        pool, connection = _pool(tmp_path), tiny_stdio.connection()
        try:
            first = await _call(pool, connection)
            process = pool.processes.get("k")
            assert process is not None and process.state is State.RUNNING
            for _ in range(3):
                pid = process.pid
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
                _wait_until_exited(pid)
                assert process.state is State.RUNNING  # nobody has told the supervisor yet
                assert await _call(pool, connection) not in (first, pid)
        finally:
            await pool.aclose()

    run_on(factory, main(), 60)


@pytest.mark.parametrize("factory", LOOPS)
def test_a_crash_loop_beyond_the_short_back_off_is_still_refused_with_a_retry_time(
    tmp_path: Path, factory: LoopFactory
) -> None:
    """The other half of the rule: a back-off longer than a call may wait is a refusal, at
    once, saying when to retry (rounded up: never "retry in 0.0s")."""
    from appliance.errors import UpstreamError

    async def main() -> None:
        pool, connection = _pool(tmp_path, backoff_initial_s=30.0), tiny_stdio.connection()
        try:
            pid = await _call(pool, connection)
            os.kill(pid, signal.SIGKILL)
            _wait_until_exited(pid)
            with pytest.raises(UpstreamError) as refused:
                await _call(pool, connection)
            assert refused.value.reason == "upstream_unavailable"
            assert "retry in 30.0s" in refused.value.public_message
        finally:
            await pool.aclose()

    run_on(factory, main(), 60)
