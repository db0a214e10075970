"""Stdio server processes: real children, written as small Python scripts into tmp_path.

Each case checks the I-6 invariant on the way out: no zombie child of the test process and
no file descriptor left open.
Every wait is bounded with ``asyncio.timeout``; the only sleeps are inside the children.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import textwrap
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.children import spawn
from appliance.children.processes import (
    ProcessRegistry,
    State,
    StdioPolicy,
    StdioProcess,
    StdioSpec,
    StdioSpecRejected,
    check_spec,
)
from appliance.errors import UpstreamError
from tests.support.loops import LOOPS, LoopFactory, run_on

PY = sys.executable
UPSTREAM_SERVER = Path(__file__).resolve().parents[2] / "support" / "upstream_server.py"

ECHO = """
import sys
while line := sys.stdin.buffer.readline():
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
"""


# Every case runs on the stock asyncio loop and on uvloop (the ``loop`` fixture below): the
# supervisor must behave alike on both.
_loop: list[LoopFactory] = [asyncio.new_event_loop]


def run(coro: Coroutine[Any, Any, None], seconds: float = 30.0) -> None:
    run_on(_loop[0], coro, seconds)


@pytest.fixture(autouse=True, params=LOOPS)
def loop(request: pytest.FixtureRequest) -> Iterator[LoopFactory]:
    _loop[0] = request.param
    yield request.param
    _loop[0] = asyncio.new_event_loop


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _stat(pid: int) -> tuple[str, int] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    """Running (a zombie parented by init is dead for our purposes: init reaps it)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def our_zombies() -> list[int]:
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) and stat == ("Z", me):
            found.append(int(entry.name))
    return found


@pytest.fixture(autouse=True)
def _no_zombies_and_no_leaked_fds() -> Iterator[None]:
    fds = len(os.listdir("/proc/self/fd"))
    yield
    assert our_zombies() == []
    assert len(os.listdir("/proc/self/fd")) == fds


@pytest.fixture
def policy(tmp_path: Path) -> StdioPolicy:
    return make_policy(tmp_path)


def make_policy(tmp_path: Path, **overrides: Any) -> StdioPolicy:
    values: dict[str, Any] = {
        "workdir_root": tmp_path / "stdio",
        "base_env": {"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        "close_grace_s": 1.0,
        "term_grace_s": 1.0,
        "write_timeout_s": 1.0,
        "backoff_initial_s": 0.05,
        "backoff_max_s": 0.4,
    }
    values.update(overrides)
    return StdioPolicy(**values)


def script(tmp_path: Path, body: str, **spec: Any) -> StdioSpec:
    path = tmp_path / f"child_{abs(hash(body))}.py"
    path.write_text(textwrap.dedent(body))
    return StdioSpec(command=PY, args=(str(path),), **spec)


# -- spec checks ------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["bash", "/bin/sh", "python3; rm -rf /", "../bin/python3", "", "sudo"])
def test_a_command_outside_the_allowed_executables_is_refused_naming_command(
    policy: StdioPolicy, command: str
) -> None:
    with pytest.raises(StdioSpecRejected) as info:
        check_spec("kit", StdioSpec(command=command), policy)
    assert info.value.field == "command"
    assert info.value.http_status == 422


def test_allowed_executables_are_a_setting_checked_on_the_basename(tmp_path: Path) -> None:
    narrow = make_policy(tmp_path, allowed_executables=("node",))
    assert check_spec("kit", StdioSpec(command="/usr/bin/node"), narrow) == (tmp_path / "stdio/kit").resolve()
    with pytest.raises(StdioSpecRejected):
        check_spec("kit", StdioSpec(command="npx"), narrow)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (StdioSpec(command="npx", cwd="../../etc"), "cwd"),
        (StdioSpec(command="npx", cwd="/tmp"), "cwd"),
        (StdioSpec(command="npx", env={"BAD=NAME": "x"}), "env"),
        (StdioSpec(command="npx", env={"OK": "nul\0byte"}), "env"),
        (StdioSpec(command="npx", args=("a\0b",)), "args"),
    ],
)
def test_a_cwd_outside_the_workdir_or_a_bad_env_is_refused(
    policy: StdioPolicy, spec: StdioSpec, field: str
) -> None:
    with pytest.raises(StdioSpecRejected) as info:
        check_spec("kit", spec, policy)
    assert info.value.field == field


# -- the channel ------------------------------------------------------------------------------


def test_lines_go_in_and_out_and_stop_closes_stdin_first(tmp_path: Path, policy: StdioPolicy) -> None:
    async def main() -> None:
        proc = StdioProcess("echo", script(tmp_path, ECHO), policy)
        assert proc.state is State.STOPPED
        await proc.start()
        assert proc.state is State.STARTING and proc.generation == 1
        pid = proc.pid
        assert pid is not None
        await proc.write_line(b'{"jsonrpc":"2.0","id":1}')
        assert await proc.read_line() == b'{"jsonrpc":"2.0","id":1}'
        assert proc.state is State.RUNNING
        started = time.monotonic()
        await proc.stop()
        # The echo child exits on EOF: no signal was needed.
        assert time.monotonic() - started < policy.close_grace_s
        assert proc.state is State.STOPPED and proc.returncode == 0
        assert not alive(pid)
        with pytest.raises(UpstreamError, match="not running"):
            await proc.read_line()

    run(main())


def test_the_child_sees_only_the_given_environment_and_runs_in_its_workdir(
    tmp_path: Path, policy: StdioPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """VAULT-08: the child environment is the allowlist plus its own variables; no master key."""
    monkeypatch.setenv("TOOLSPOKE_MASTER_KEY_CANARY", "must-not-leak")
    body = """
    import json, os, sys
    raw = open("/proc/self/environ", "rb").read()   # as exec'd, before Python touches it
    env = dict(item.decode().split("=", 1) for item in raw.split(b"\\0") if item)
    print(json.dumps({"env": env, "cwd": os.getcwd(), "argv": sys.argv[1:]}), flush=True)
    sys.stdin.read()
    """
    spec = script(tmp_path, body, env={"API_TOKEN": "given"})

    async def main() -> None:
        proc = StdioProcess("envdump", spec, policy)
        await proc.start()
        seen = json.loads(await proc.read_line())
        assert seen["env"] == {**policy.base_env, "API_TOKEN": "given"}
        assert seen["cwd"] == str((tmp_path / "stdio" / "envdump").resolve())
        await proc.aclose()

    run(main())


def test_a_child_inherits_no_open_descriptor_and_gets_its_arguments_without_a_shell(
    tmp_path: Path, policy: StdioPolicy
) -> None:
    """VAULT-08: no descriptor of the gateway (the database, a socket) reaches the child,
    even one marked inheritable, on either loop (uvloop's subprocess_exec ignores close_fds);
    arguments arrive as given, never through a shell."""
    leaked = os.open(tmp_path / "toolspoke.db", os.O_RDWR | os.O_CREAT, 0o600)
    os.set_inheritable(leaked, True)
    body = """
    import json, os, sys
    fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
    print(json.dumps({"fds": fds, "argv": sys.argv[1:]}), flush=True)
    sys.stdin.read()
    """
    args = ("$(touch pwned)", "a b;c", "`id`")
    base = script(tmp_path, body)
    spec = StdioSpec(command=base.command, args=(*base.args, *args))

    async def main() -> None:
        proc = StdioProcess("fds", spec, policy)
        await proc.start()
        seen = json.loads(await proc.read_line())
        await proc.aclose()
        # 0-2 are the pipes; the one more allowed is the directory listdir itself opened.
        assert len([fd for fd in seen["fds"] if fd > 2]) <= 1, seen["fds"]
        assert seen["argv"] == list(args)
        assert not (tmp_path / "stdio" / "fds" / "pwned").exists()

    try:
        run(main())
    finally:
        os.close(leaked)


def test_non_json_stdout_lines_are_dropped_with_a_log_line(
    tmp_path: Path, policy: StdioPolicy, caplog: pytest.LogCaptureFixture
) -> None:
    body = """
    print("Starting default (STDIO) server...", flush=True)
    print("", flush=True)
    print('{"ok": 1}', flush=True)
    import sys; sys.stdin.read()
    """

    async def main() -> None:
        proc = StdioProcess("banner", script(tmp_path, body), policy)
        await proc.start()
        assert await proc.read_line() == b'{"ok": 1}'
        await proc.aclose()

    with caplog.at_level(logging.INFO, logger="appliance.children.processes"):
        run(main())
    assert any("dropped non-JSON stdout line" in r.getMessage() for r in caplog.records)


def test_a_real_mcp_server_answers_initialize_over_the_channel(tmp_path: Path) -> None:
    # A real Python server needs more than the fixture's 1 s to exit on a loaded machine; the
    # test is about a clean exit on stdin close, so the grace is generous (the wait ends at exit).
    policy = make_policy(tmp_path, close_grace_s=15.0)
    spec = StdioSpec(command=PY, args=(str(UPSTREAM_SERVER),), env={"UPSTREAM_TRANSPORT": "stdio"})
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "toolspoke-test", "version": "0"},
        },
    }

    async def main() -> None:
        proc = StdioProcess("upstream", spec, policy)
        await proc.start()
        await proc.write_line(json.dumps(initialize).encode())
        reply = json.loads(await proc.read_line())
        assert reply["id"] == 1
        assert reply["result"]["protocolVersion"] == "2025-11-25"
        assert reply["result"]["serverInfo"]["name"] == "gateway-test-upstream"
        assert proc.state is State.RUNNING
        await proc.write_line(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        await proc.write_line(b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}')
        listed = json.loads(await proc.read_line())
        assert "add" in {tool["name"] for tool in listed["result"]["tools"]}
        await proc.stop()
        assert proc.returncode == 0

    run(main())


# -- failures ---------------------------------------------------------------------------------


def test_a_child_that_crashes_at_start_reports_status_and_stderr_within_a_second(
    tmp_path: Path, policy: StdioPolicy
) -> None:
    """UP-08: a crash at start fails within a second with the exit status and stderr lines."""
    body = """
    import sys
    print("fatal: API_TOKEN is not set", file=sys.stderr, flush=True)
    sys.exit(3)
    """

    async def main() -> None:
        proc = StdioProcess("crash", script(tmp_path, body), policy)
        await proc.start()
        started = time.monotonic()
        with pytest.raises(UpstreamError) as info:
            await proc.read_line()
        assert time.monotonic() - started < 1.5
        assert info.value.reason == "upstream_unavailable"
        assert info.value.data["exit_status"] == 3
        assert "fatal: API_TOKEN is not set" in info.value.data["stderr"]
        assert "exited with status 3" in info.value.public_message
        assert proc.state is State.CRASHED and proc.returncode == 3
        assert proc.last_stderr() == ["fatal: API_TOKEN is not set"]
        await proc.aclose()

    run(main())


def test_an_exit_mid_call_wakes_the_waiting_reader_within_a_second(
    tmp_path: Path, policy: StdioPolicy
) -> None:
    """UP-08: an exit mid-call fails the waiting call within a second, not at the deadline."""
    body = """
    import os, sys
    sys.stdout.write(sys.stdin.readline()); sys.stdout.flush()
    sys.stdin.readline()                       # the second request is never answered
    os.kill(os.getpid(), 11)                   # SIGSEGV
    """

    async def main() -> None:
        proc = StdioProcess("midway", script(tmp_path, body), policy)
        await proc.start()
        await proc.write_line(b'{"id":1}')
        assert await proc.read_line() == b'{"id":1}'
        reader = asyncio.ensure_future(proc.read_line())
        await proc.write_line(b'{"id":2}')
        started = time.monotonic()
        with pytest.raises(UpstreamError) as info:
            await reader
        assert time.monotonic() - started < 1.5
        assert info.value.data["exit_status"] == -signal.SIGSEGV
        assert "SIGSEGV" in info.value.public_message
        with pytest.raises(UpstreamError):
            await proc.write_line(b'{"id":3}')
        await proc.aclose()

    run(main())


def test_a_crash_is_noticed_even_when_a_grandchild_holds_stdout_open(
    tmp_path: Path, policy: StdioPolicy
) -> None:
    """UP-08: a crash is noticed even when a grandchild holds stdout open."""
    body = """
    import json, subprocess, sys
    grandchild = subprocess.Popen(["sleep", "300"])   # inherits our stdout pipe
    print(json.dumps({"grandchild": grandchild.pid}), flush=True)
    sys.stdin.readline()
    sys.exit(1)
    """

    async def main() -> None:
        proc = StdioProcess("holder", script(tmp_path, body), policy)
        await proc.start()
        grandchild = json.loads(await proc.read_line())["grandchild"]
        assert alive(grandchild)
        reader = asyncio.ensure_future(proc.read_line())
        await proc.write_line(b'{"id":1}')
        started = time.monotonic()
        with pytest.raises(UpstreamError) as info:
            await reader
        assert time.monotonic() - started < 1.5
        assert info.value.data["exit_status"] == 1
        await proc.aclose()
        assert not alive(grandchild)

    run(main())


def test_stop_takes_the_whole_process_group_with_it(tmp_path: Path, policy: StdioPolicy) -> None:
    """UP-09: recycling takes the whole process group; no orphaned grandchildren."""
    body = """
    import json, subprocess, sys
    grandchild = subprocess.Popen(["sleep", "300"], stdout=subprocess.DEVNULL)
    print(json.dumps({"grandchild": grandchild.pid}), flush=True)
    sys.stdin.read()
    """  # exits on EOF and leaves the grandchild behind, as an npx wrapper does

    async def main() -> None:
        proc = StdioProcess("tree", script(tmp_path, body), policy)
        await proc.start()
        grandchild = json.loads(await proc.read_line())["grandchild"]
        pid = proc.pid
        assert pid is not None and alive(grandchild)
        await proc.stop()
        assert not alive(pid) and not alive(grandchild)

    run(main())


def test_a_child_that_ignores_sigterm_is_killed_and_reaped(tmp_path: Path, policy: StdioPolicy) -> None:
    """UP-09: close stdin, SIGTERM, then SIGKILL; the child is reaped."""
    body = """
    import signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print('{"ready": true}', flush=True)
    sys.stdin.read()
    time.sleep(300)
    """

    async def main() -> None:
        proc = StdioProcess("stubborn", script(tmp_path, body), policy)
        await proc.start()
        await proc.read_line()
        pid = proc.pid
        assert pid is not None
        started = time.monotonic()
        await proc.stop()
        elapsed = time.monotonic() - started
        assert policy.close_grace_s + policy.term_grace_s <= elapsed < 5.0
        assert proc.returncode == -signal.SIGKILL
        assert not alive(pid)

    run(main())


def test_a_stderr_flood_is_drained_and_only_the_last_lines_kept(
    tmp_path: Path, policy: StdioPolicy, caplog: pytest.LogCaptureFixture
) -> None:
    """UP-08: a stderr flood is drained; only the last lines are kept."""
    body = """
    import sys
    for i in range(100_000):
        sys.stderr.write(f"noise {i}\\n")
    sys.stderr.write("x" * 100_000)            # one endless line without a newline
    sys.stderr.write("\\nlast words\\n")
    sys.stderr.flush()
    print('{"done": true}', flush=True)
    sys.stdin.read()
    """

    async def main() -> None:
        proc = StdioProcess("flood", script(tmp_path, body), policy)
        await proc.start()
        assert await proc.read_line() == b'{"done": true}'
        tail = proc.last_stderr()
        assert len(tail) == policy.stderr_lines
        assert tail[-1] == "last words"
        assert all(len(line) <= 2000 for line in tail)
        await proc.aclose()

    with caplog.at_level(logging.INFO, logger="appliance.children.processes"):
        run(main())
    stderr_records = [r for r in caplog.records if "stderr:" in r.getMessage()]
    assert len(stderr_records) < 1000  # rate-limited, not 100,000 log lines


def test_an_over_long_line_is_refused_and_the_child_recycled(tmp_path: Path) -> None:
    """UP-04: an over-long stdout line is upstream_too_large and the child is recycled."""
    policy = make_policy(tmp_path, max_line_bytes=64 * 1024)
    body = """
    import sys
    print('{"fits": "' + "a" * 60_000 + '"}', flush=True)
    print('{"huge": "' + "b" * 200_000 + '"}', flush=True)
    sys.stdin.read()
    """

    async def main() -> None:
        clock = FakeClock()
        proc = StdioProcess("big", script(tmp_path, body), policy, clock=clock)
        await proc.start()
        assert len(await proc.read_line()) > 60_000
        pid = proc.pid
        assert pid is not None
        with pytest.raises(UpstreamError) as info:
            await proc.read_line()
        assert info.value.reason == "upstream_too_large"
        assert proc.state is State.CRASHED
        clock.now += 1.0
        await proc.start()  # waits for the old child to be gone first: one live child at most
        assert not alive(pid) and proc.generation == 2
        await proc.aclose()

    run(main())


def test_a_child_that_stops_reading_stdin_cannot_block_the_writer(
    tmp_path: Path, policy: StdioPolicy
) -> None:
    """UP-09: a child that stops reading stdin cannot block the writer past its bound."""
    body = """
    import time
    time.sleep(300)
    """

    async def main() -> None:
        proc = StdioProcess("deaf", script(tmp_path, body), policy)
        await proc.start()
        pid = proc.pid
        assert pid is not None
        chunk = b'{"pad":"' + b"z" * 65_536 + b'"}'
        started = time.monotonic()
        with pytest.raises(UpstreamError) as info:
            for _ in range(64):  # 4 MiB: far more than a pipe and the transport buffer hold
                await proc.write_line(chunk)
        assert info.value.reason == "upstream_timeout"
        assert time.monotonic() - started < policy.write_timeout_s + 1.0
        assert proc.state is State.CRASHED
        await proc.aclose()
        assert not alive(pid)

    run(main())


def test_a_child_that_closes_stdout_but_lives_on_is_recycled(tmp_path: Path, policy: StdioPolicy) -> None:
    """UP-08: a child that closes stdout but lives on is recycled."""
    body = """
    import os, time
    os.close(1)
    time.sleep(300)
    """

    async def main() -> None:
        proc = StdioProcess("mute", script(tmp_path, body), policy)
        await proc.start()
        with pytest.raises(UpstreamError, match="closed its stdout"):
            await proc.read_line()
        await proc.aclose()

    run(main())


def test_a_slow_cold_start_is_starting_until_the_first_line(tmp_path: Path, policy: StdioPolicy) -> None:
    slow = """
    import sys, time
    time.sleep(0.5)                             # npx fetching a package
    sys.stdout.write(sys.stdin.readline()); sys.stdout.flush()
    sys.stdin.read()
    """

    async def main() -> None:
        proc = StdioProcess("cold", script(tmp_path, slow, start_timeout_s=5.0), policy)
        await proc.start()
        await proc.write_line(b'{"id":1}')
        assert proc.state is State.STARTING
        assert await proc.read_line() == b'{"id":1}'
        assert proc.state is State.RUNNING
        await proc.aclose()

    run(main())


def test_a_child_that_never_answers_fails_at_the_start_timeout(tmp_path: Path, policy: StdioPolicy) -> None:
    """UP-09: a server that never answers initialize fails at its start deadline."""
    silent = """
    import sys
    sys.stdin.read()
    """

    async def main() -> None:
        proc = StdioProcess("silent", script(tmp_path, silent, start_timeout_s=0.3), policy)
        await proc.start()
        await proc.write_line(b'{"id":1}')
        started = time.monotonic()
        with pytest.raises(UpstreamError) as info:
            await proc.read_line()
        assert 0.2 < time.monotonic() - started < 1.5
        assert info.value.reason == "upstream_timeout"
        assert proc.state is State.CRASHED
        await proc.aclose()

    run(main())


def test_an_idle_child_is_stopped_after_the_idle_timeout(tmp_path: Path, policy: StdioPolicy) -> None:
    async def main() -> None:
        proc = StdioProcess("idle", script(tmp_path, ECHO, idle_timeout_s=0.4), policy)
        await proc.start()
        await proc.write_line(b'{"id":1}')
        await proc.read_line()
        pid = proc.pid
        assert pid is not None
        started = time.monotonic()
        with pytest.raises(UpstreamError, match="idling"):
            await proc.read_line()
        assert 0.2 < time.monotonic() - started < 2.0
        assert proc.state is State.STOPPED
        await proc.aclose()
        assert not alive(pid) and proc.returncode == 0

    run(main())


def test_a_crash_loop_backs_off_exponentially_and_never_storms(tmp_path: Path, policy: StdioPolicy) -> None:
    """UP-08: a crash loop backs off exponentially; no fork storm."""
    body = """
    import sys
    sys.exit(1)
    """

    async def main() -> None:
        clock = FakeClock()
        proc = StdioProcess("loop", script(tmp_path, body), policy, clock=clock)
        delays = []
        for _ in range(5):
            await proc.start()
            with pytest.raises(UpstreamError):
                await proc.read_line()
            spawned = proc.generation
            for _ in range(100):  # a hammering caller gets refusals, not spawns
                with pytest.raises(UpstreamError) as info:
                    await proc.start()
            assert proc.generation == spawned
            assert info.value.data["exit_status"] == 1
            delays.append(info.value.data["retry_after_s"])
            clock.now += delays[-1]
        assert delays == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.4])
        await proc.aclose()

    run(main())


def test_a_command_missing_from_the_childs_path_fails_cleanly(tmp_path: Path) -> None:
    policy = make_policy(tmp_path, base_env={"PATH": str(tmp_path / "empty")})

    async def main() -> None:
        proc = StdioProcess("missing", StdioSpec(command="deno", args=("run",)), policy)
        with pytest.raises(UpstreamError, match="not found") as info:
            await proc.start()
        assert info.value.reason == "upstream_unavailable"
        assert proc.state is State.CRASHED
        await proc.aclose()

    run(main())


# -- the registry -----------------------------------------------------------------------------


def test_the_registry_stops_every_child_on_shutdown(tmp_path: Path, policy: StdioPolicy) -> None:
    stubborn = """
    import signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.stdin.read()
    time.sleep(300)
    """

    async def main() -> None:
        registry = ProcessRegistry(policy)
        echo = await registry.put("echo", script(tmp_path, ECHO))
        hard = await registry.put("hard", script(tmp_path, stubborn))
        assert await registry.put("echo", script(tmp_path, ECHO)) is echo  # same spec: same process
        await echo.start()
        await hard.start()
        pids = [echo.pid, hard.pid]
        await registry.aclose()
        assert all(pid is not None and not alive(pid) for pid in pids)
        assert echo.state is State.STOPPED and hard.state is State.STOPPED
        with pytest.raises(UpstreamError):
            await registry.put("late", script(tmp_path, ECHO))
        with pytest.raises(UpstreamError):
            await echo.start()

    run(main())


def test_a_changed_spec_replaces_the_running_child(tmp_path: Path, policy: StdioPolicy) -> None:
    async def main() -> None:
        registry = ProcessRegistry(policy)
        first = await registry.put("kit", script(tmp_path, ECHO))
        await first.start()
        pid = first.pid
        second = await registry.put("kit", script(tmp_path, ECHO, idle_timeout_s=5.0))
        assert second is not first and registry.get("kit") is second
        assert pid is not None and not alive(pid)
        await registry.aclose()

    run(main())


def test_a_fast_writer_is_paused_not_buffered_and_loses_no_line(tmp_path: Path) -> None:
    """UP-04: a fast writer is paused, so memory stays bounded by the line limit."""
    policy = make_policy(tmp_path, max_line_bytes=1024)
    body = """
    import sys
    for i in range(2000):
        sys.stdout.write('{"n": %d, "pad": "%s"}\\n' % (i, "p" * 400))
    sys.stdout.flush()
    sys.stdin.read()
    """

    async def main() -> None:
        proc = StdioProcess("fast", script(tmp_path, body), policy)
        await proc.start()
        for expected in range(2000):
            assert json.loads(await proc.read_line())["n"] == expected
            child = proc._child
            # Paused at twice the line limit; one pipe read (asyncio reads 256 KiB) may overshoot.
            assert child is not None and child.queued <= 2 * policy.max_line_bytes + 256 * 1024
        await proc.aclose()

    run(main())


def test_concurrent_starts_spawn_one_child(tmp_path: Path, policy: StdioPolicy) -> None:
    async def main() -> None:
        proc = StdioProcess("once", script(tmp_path, ECHO), policy)
        await asyncio.gather(*(proc.start() for _ in range(10)))
        assert proc.generation == 1
        await proc.aclose()

    run(main())


def test_an_executable_that_cannot_be_run_fails_cleanly(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "node"
    fake.write_text("not a program\n")
    fake.chmod(0o755)
    policy = make_policy(tmp_path, base_env={"PATH": str(bin_dir)})

    async def main() -> None:
        proc = StdioProcess("broken", StdioSpec(command="node"), policy)
        with pytest.raises(UpstreamError, match="cannot start") as info:
            await proc.start()
        assert info.value.reason == "upstream_unavailable"
        assert proc.state is State.CRASHED and proc.pid is None
        await proc.aclose()

    run(main())


def test_each_case_runs_on_the_loop_it_names(loop: LoopFactory) -> None:
    async def main() -> None:
        running = type(asyncio.get_running_loop()).__module__
        assert running.startswith("uvloop" if loop is not asyncio.new_event_loop else "asyncio")

    run(main())


def test_without_a_pidfd_an_exit_is_found_by_polling_and_the_child_reaped(
    tmp_path: Path, policy: StdioPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel without pidfd_open (Linux < 5.3): lines still flow, a crash is still noticed
    within about a second with its status, and the child is reaped (no zombie)."""
    monkeypatch.setattr(spawn, "_pidfd_open", lambda pid: None)
    body = """
    import sys
    line = sys.stdin.buffer.readline()
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
    sys.exit(4)
    """

    async def main() -> None:
        proc = StdioProcess("polled", script(tmp_path, body), policy)
        await proc.start()
        await proc.write_line(b'{"n": 1}')
        assert await proc.read_line() == b'{"n": 1}'
        started = time.monotonic()
        with pytest.raises(UpstreamError, match="exited with status 4"):
            await proc.read_line()
        assert time.monotonic() - started < 1.5
        assert proc.returncode == 4
        await proc.aclose()

    run(main())
