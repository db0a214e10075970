"""Local stdio MCP servers: spawn, feed, watch and stop one child process per toolkit.

This is a line channel and nothing more: bytes in on stdin, lines out of stdout. JSON-RPC
meaning (ids, initialize, cancellation) belongs to the session layer above it.

Lifecycle (one ``StdioProcess`` per toolkit, at most one live child)::

    stopped ──start()──▶ starting ──first JSON line on stdout──▶ running
       ▲                    │                                      │
       │ stop() / idle      │ exit, start timeout, over-long line, │
       └────────────────────┤ stdin not read, stdout closed ◀──────┘
                            ▼
                         crashed ──start() after the back-off──▶ starting

The child runs in its own session (``start_new_session=True``), so its process group id is
its pid and every stop signals the whole group: ``npx`` wrappers and their ``node``
grandchildren go together (peers/NOTES.md). Stop follows the MCP lifecycle for stdio: close
stdin, then SIGTERM, then SIGKILL. The direct child is reaped by asyncio's child watcher;
grandchildren are reparented to init when the leader dies, and init reaps them.

The child's environment is exactly ``policy.base_env`` plus ``spec.env`` (RELIABILITY A9,
VAULT-08): nothing else of the gateway's environment, where the master key may live.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import re
import shutil
import signal
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.errors import InvalidParams, UpstreamError
from appliance.secret import Redactor, Secret

log = logging.getLogger(__name__)

DEFAULT_ALLOWED_EXECUTABLES: tuple[str, ...] = ("npx", "uvx", "node", "python3", "python", "deno")
DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# An exited child may still have bytes in the pipe; wait this long for stdout EOF before
# declaring the crash, so a reply written just before exit is delivered first. Short, so an
# in-flight reader hears of the crash within about a second (UP-08).
_DRAIN_GRACE_S = 0.5
_REAP_TIMEOUT_S = 5.0
_STDERR_LINE_CHARS = 2000
_ERROR_STDERR_LINES = 10
_LOG_LINES_PER_S = 50


class StdioSpecRejected(InvalidParams):
    """A stdio server definition the gateway refuses to run; ``field`` names the culprit."""


class State(enum.StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    CRASHED = "crashed"


@dataclass(frozen=True)
class StdioPolicy:
    """Operator settings for every stdio server, passed in by the caller (config reads env).

    ``base_env`` is the minimal inherited environment (e.g. PATH and HOME, from
    ``config.environment_snapshot``); ``workdir_root`` is the directory every child's cwd
    must lie in (a folder of the data directory).
    """

    workdir_root: Path
    base_env: Mapping[str, str] = field(default_factory=dict)
    allowed_executables: tuple[str, ...] = DEFAULT_ALLOWED_EXECUTABLES
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    stderr_lines: int = 50
    write_timeout_s: float = 10.0
    close_grace_s: float = 2.0  # stdin closed → SIGTERM
    term_grace_s: float = 3.0  # SIGTERM → SIGKILL
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 60.0
    stable_after_s: float = 30.0  # a child that lived this long resets the back-off


@dataclass(frozen=True)
class StdioSpec:
    """One toolkit's server: what to run, with which environment, where, and for how long.

    ``cwd`` is relative to the policy's ``workdir_root`` (or absolute inside it); empty
    means ``<workdir_root>/<name>``. It is created on start.
    """

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    idle_timeout_s: float = 600.0
    start_timeout_s: float = 60.0
    # Vault-held variables (a token the server reads from its environment): added to the
    # child's environment only, and redacted from its stderr in the log and in errors.
    secret_env: Mapping[str, Secret] = field(default_factory=dict)
    # The toolkit's response cap: a longer stdout line is allowed up to it when it is above
    # the policy's line limit (a cap below that limit is checked on the call's result).
    max_line_bytes: int | None = None


def check_spec(name: str, spec: StdioSpec, policy: StdioPolicy) -> Path:
    """Refuse a spec the gateway must not run; return the resolved working directory."""
    if not _SAFE_NAME.fullmatch(name):
        raise StdioSpecRejected(f"invalid stdio server name {name!r}", field="name")
    command = spec.command
    if not command or "\0" in command or (os.sep in command and not os.path.isabs(command)):
        raise StdioSpecRejected("command must be a program name or an absolute path", field="command")
    if os.path.basename(command) not in policy.allowed_executables:
        allowed = ", ".join(policy.allowed_executables)
        raise StdioSpecRejected(
            f"command {os.path.basename(command)!r} is not an allowed executable (allowed: {allowed})",
            field="command",
        )
    if any(not isinstance(a, str) or "\0" in a for a in spec.args):
        raise StdioSpecRejected("arguments must be strings without NUL bytes", field="args")
    for key, value in spec.env.items():
        if not _ENV_NAME.fullmatch(key) or not isinstance(value, str) or "\0" in value:
            raise StdioSpecRejected(f"invalid environment variable {key!r}", field="env")
    for key in spec.secret_env:
        if not _ENV_NAME.fullmatch(key):
            raise StdioSpecRejected(f"invalid environment variable {key!r}", field="env")
    if spec.idle_timeout_s <= 0 or spec.start_timeout_s <= 0:
        raise StdioSpecRejected("timeouts must be positive", field="idle_timeout_s")
    root = policy.workdir_root.resolve()
    cwd = (root / (spec.cwd or name)).resolve()  # an absolute spec.cwd replaces root here
    if cwd != root and root not in cwd.parents:
        raise StdioSpecRejected(f"cwd must lie inside {root}", field="cwd")
    return cwd


def _exit_text(returncode: int | None) -> str:
    if returncode is None:
        return "ended"
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-returncode).name}"
    return f"exited with status {returncode}"


class _LogBudget:
    """At most ``_LOG_LINES_PER_S`` log lines a second per child: a stderr flood must not
    become a log flood. Suppressed lines are counted and reported once the second is over."""

    def __init__(self) -> None:
        self.window = 0
        self.used = 0
        self.suppressed = 0

    def allow(self, name: str) -> bool:
        now = int(time.monotonic())
        if now != self.window:
            if self.suppressed:
                log.warning("stdio %s: %d output lines not logged (rate limit)", name, self.suppressed)
            self.window, self.used, self.suppressed = now, 0, 0
        self.used += 1
        if self.used > _LOG_LINES_PER_S:
            self.suppressed += 1
            return False
        return True


class _Child(asyncio.SubprocessProtocol):
    """One spawned child: its pipes, its queued stdout lines, its end and its termination."""

    def __init__(self, owner: StdioProcess, generation: int) -> None:
        self.owner = owner
        self.name = owner.name
        self.policy = owner.policy
        self.line_limit = max(owner.policy.max_line_bytes, owner.spec.max_line_bytes or 0)
        self.generation = generation
        self.transport: asyncio.SubprocessTransport | None = None
        self.pid = 0
        self.spawned_at = owner.clock()
        self.returncode: int | None = None
        self.lines: deque[bytes] = deque()
        self.queued = 0
        self.paused = False
        self.readable = asyncio.Event()  # a line is queued, or the child ended
        self.writable = asyncio.Event()  # stdin buffer below the high-water mark, or ended
        self.writable.set()
        self.answered = asyncio.Event()  # first JSON line seen: the server is up
        self.settled = asyncio.Event()  # answered or ended: the start phase is over
        self.ended = asyncio.Event()
        self.exited = asyncio.Event()
        self.stdout_eof = asyncio.Event()
        self.stdin_lost = False
        self.error: UpstreamError | None = None  # set once: why this child is over
        self.stderr: deque[str] = deque(maxlen=self.policy.stderr_lines)
        self._out = bytearray()
        self._err = bytearray()
        self._budget = _LogBudget()
        self._term: asyncio.Task[None] | None = None

    # -- pipe events (called by asyncio, synchronously) -------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self.transport = transport
        self.pid = transport.get_pid()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self._stdout(data)
        else:
            self._stderr(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 0:
            self.stdin_lost = True
            self.writable.set()
        elif fd == 1:
            self.stdout_eof.set()
            self.owner._spawn_task(self._after_stdout_eof())
        elif self._err:
            self._stderr_line(bytes(self._err))
            self._err.clear()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def process_exited(self) -> None:
        assert self.transport is not None
        self.returncode = self.transport.get_returncode()
        self.exited.set()
        self.owner._spawn_task(self._after_exit())

    # -- stdout and stderr -----------------------------------------------------------------
    def _stdout(self, data: bytes) -> None:
        if self.error is not None:
            return  # over: whatever is still in the pipe has no reader
        buf = self._out
        start, search = 0, len(buf)
        buf += data
        while (nl := buf.find(b"\n", search)) != -1:
            self._stdout_line(bytes(buf[start:nl]))
            start = search = nl + 1
            if self.error is not None:
                return
        del buf[:start]
        if len(buf) > self.line_limit:
            self._too_large()

    def _stdout_line(self, line: bytes) -> None:
        if len(line) > self.line_limit:
            self._too_large()
            return
        line = line.rstrip(b"\r")
        body = line.lstrip()
        if not body:
            return
        # The spec forbids non-MCP output on stdout, but servers print banners there; drop
        # them here with a log line (a cheap first-byte test; parsing is the caller's job).
        if body[:1] not in (b"{", b"["):
            if self._budget.allow(self.name):
                log.warning("stdio %s: dropped non-JSON stdout line: %r", self.name, line[:200])
            return
        self.lines.append(line)
        self.queued += len(line)
        self.readable.set()
        if not self.answered.is_set():
            self.answered.set()
            self.settled.set()
            self.owner._child_answered(self)
        # Back-pressure: a reader that falls behind pauses the pipe, and the child blocks on
        # its own stdout, instead of the gateway buffering without bound (the queue stays
        # under twice the line limit plus one pipe read).
        if self.queued > 2 * self.line_limit and not self.paused:
            self._pipe_reading(pause=True)

    def _too_large(self) -> None:
        limit = self.line_limit
        self.fail(
            UpstreamError(
                f"stdio server {self.name!r} wrote a line over {limit} bytes", reason="upstream_too_large"
            )
        )

    def _stderr(self, data: bytes) -> None:
        self._err += data
        *lines, rest = self._err.split(b"\n")
        for line in lines:
            self._stderr_line(line)
        # Keep memory bounded when a child writes stderr without newlines.
        self._err = bytearray(rest) if len(rest) <= 8192 else bytearray()
        if len(rest) > 8192:
            self._stderr_line(rest)

    def _stderr_line(self, raw: bytes | bytearray) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        text = self.owner.redactor.text(text)[:_STDERR_LINE_CHARS]
        self.stderr.append(text)
        if self._budget.allow(self.name):
            log.info("stdio %s stderr: %s", self.name, text)

    def take_line(self) -> bytes | None:
        if not self.lines:
            return None
        line = self.lines.popleft()
        self.queued -= len(line)
        if not self.lines and self.error is None:
            self.readable.clear()
        if self.paused and self.queued <= self.line_limit:
            self._pipe_reading(pause=False)
        return line

    def _pipe_reading(self, *, pause: bool) -> None:
        pipe = self.transport.get_pipe_transport(1) if self.transport else None
        if not isinstance(pipe, asyncio.ReadTransport) or pipe.is_closing():
            return
        if pause:
            pipe.pause_reading()
        else:
            pipe.resume_reading()
        self.paused = pause

    # -- ending ----------------------------------------------------------------------------
    def error_data(self) -> dict[str, object]:
        data: dict[str, object] = {"exit_status": self.returncode}
        if self.stderr:
            data["stderr"] = list(self.stderr)[-_ERROR_STDERR_LINES:]
        return data

    def end(self, error: UpstreamError, *, failed: bool) -> bool:
        """Record why this child is over and wake every waiter; False if it already was."""
        if self.error is not None:
            return False
        error.data = {**self.error_data(), **error.data}
        self.error = error
        for event in (self.readable, self.writable, self.settled, self.ended):
            event.set()
        self.owner._child_ended(self, error, failed=failed)
        return True

    def fail(self, error: UpstreamError) -> None:
        """A failure seen from a callback: end the child and recycle it in the background."""
        if self.end(error, failed=True):
            self.terminate()

    async def _after_exit(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_DRAIN_GRACE_S):
                await self.stdout_eof.wait()
        self.fail(UpstreamError(f"stdio server {self.name!r} {_exit_text(self.returncode)}"))

    async def _after_stdout_eof(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_DRAIN_GRACE_S * 2):
                await self.exited.wait()
        if not self.exited.is_set():
            self.fail(UpstreamError(f"stdio server {self.name!r} closed its stdout"))

    def terminate(self) -> asyncio.Task[None]:
        """Stop the child and its group, once; callers await it (shielded), the owner tracks it."""
        if self._term is None:
            self._term = asyncio.ensure_future(self._terminate())
            self.owner._terminations.add(self._term)
            self._term.add_done_callback(self.owner._terminations.discard)
        return self._term

    async def _terminate(self) -> None:
        assert self.transport is not None
        transport = self.transport
        try:
            if not self.exited.is_set():
                stdin = transport.get_pipe_transport(0)
                if stdin is not None:
                    stdin.close()  # the polite request to exit (MCP lifecycle, stdio)
                if not await self._exited_within(self.policy.close_grace_s):
                    self._signal_group(signal.SIGTERM)
                    if not await self._exited_within(self.policy.term_grace_s):
                        self._signal_group(signal.SIGKILL)
                        if not await self._exited_within(_REAP_TIMEOUT_S):
                            log.error("stdio %s: pid %d survived SIGKILL", self.name, self.pid)
            await self._sweep_group()
        finally:
            transport.close()  # our pipe ends; never leaves an unclosed transport behind

    async def _exited_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.exited.wait()
        return self.exited.is_set()

    async def _sweep_group(self) -> None:
        """Grandchildren left in the group after the leader died: SIGTERM, then SIGKILL.

        The leader's pid stays reserved while any group member lives, so signalling the group
        by that id reaches only our processes (a new process could take the id only after the
        whole group is gone, and only then would a stray signal be possible).
        """
        if not self._signal_group(signal.SIGTERM):
            return
        deadline = time.monotonic() + self.policy.term_grace_s
        while self._signal_group(0):
            if time.monotonic() >= deadline:
                self._signal_group(signal.SIGKILL)
                return
            await asyncio.sleep(0.05)

    def _signal_group(self, sig: int) -> bool:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True


class StdioProcess:
    """The one child process of one toolkit's stdio server.

    ``start()`` spawns (idempotent), ``write_line()``/``read_line()`` carry the messages,
    ``stop()`` ends it. Failures surface as ``UpstreamError`` with ``data`` holding
    ``exit_status`` and the last ``stderr`` lines. ``generation`` grows with each spawn, so
    the session layer knows when it must handshake again.
    """

    def __init__(
        self, name: str, spec: StdioSpec, policy: StdioPolicy, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.cwd = check_spec(name, spec, policy)
        self.redactor = Redactor(v.reveal() for v in spec.secret_env.values())
        self.clock = clock  # times the crash back-off; injectable so tests need not wait it out
        self.name = name
        self.spec = spec
        self.policy = policy
        self.state = State.STOPPED
        self.generation = 0
        self.last_error: UpstreamError | None = None
        self._child: _Child | None = None
        self._last_child: _Child | None = None
        self._failures = 0
        self._next_spawn_at = 0.0
        self._last_activity = time.monotonic()
        self._start_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()  # watchers: cancelled on aclose
        self._terminations: set[asyncio.Task[None]] = set()  # stops: awaited on aclose
        self._closed = False

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None and self._child.error is None else None

    @property
    def returncode(self) -> int | None:
        """Exit status of the latest child (negative: killed by that signal)."""
        return self._last_child.returncode if self._last_child is not None else None

    def last_stderr(self) -> list[str]:
        """The latest child's last stderr lines (at most ``policy.stderr_lines``), unredacted."""
        return list(self._last_child.stderr) if self._last_child is not None else []

    def touch(self) -> None:
        """Count as traffic (the idle timer restarts)."""
        self._last_activity = time.monotonic()

    async def start(self) -> None:
        """Spawn the child unless one is live. Within the crash back-off, refuse instead."""
        async with self._start_lock:
            if self._closed:
                raise UpstreamError(f"stdio server {self.name!r} is shut down")
            if self._child is not None and self._child.error is None:
                return
            wait = self._next_spawn_at - self.clock()
            if self.state is State.CRASHED and wait > 0:
                data = self.last_error.data if self.last_error is not None else {}
                raise UpstreamError(
                    f"stdio server {self.name!r} is restarting after a failure; retry in {wait:.1f}s",
                    data={**data, "retry_after_s": round(wait, 3)},
                )
            await self._terminated()  # at most one live child: a recycled one is gone first
            await self._spawn()

    async def _spawn(self) -> None:
        env = {**self.policy.base_env, **self.spec.env}
        env.update((k, v.reveal()) for k, v in self.spec.secret_env.items())
        executable = shutil.which(self.spec.command, path=env.get("PATH", ""))
        self.generation += 1
        if executable is None:
            self._spawn_failed(f"command {self.spec.command!r} not found on the child's PATH")
            return
        child = _Child(self, self.generation)
        # Current before the exec: an instant crash reports to this process, not to nobody.
        self._child = self._last_child = child
        self.state = State.STARTING
        loop = asyncio.get_running_loop()
        try:
            self.cwd.mkdir(parents=True, exist_ok=True, mode=0o700)
            await loop.subprocess_exec(
                lambda: child,
                executable,
                *self.spec.args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            self._child = None
            self._spawn_failed(f"cannot start {self.spec.command!r}: {exc.strerror or exc}")
            return
        self.touch()
        log.info("stdio %s: started pid %d (generation %d)", self.name, child.pid, child.generation)
        self._spawn_task(self._supervise(child))

    def _spawn_failed(self, message: str) -> None:
        error = UpstreamError(f"stdio server {self.name!r}: {message}", data={"exit_status": None})
        self._record_failure(error, ran_for=0.0)
        raise error

    async def write_line(self, line: bytes, *, touch: bool = True) -> None:
        """Send one message (a trailing newline is added), bounded by ``write_timeout_s``.

        ``touch=False``: not traffic for the idle timer (a health probe's ``ping``).

        A child that stops reading its stdin fills the pipe; past the deadline it is
        recycled and the caller gets ``upstream_timeout``, so the event loop never blocks.
        """
        if b"\n" in line or b"\r" in line:
            raise ValueError("a stdio message must not contain a newline")
        child = self._live_child()
        try:
            async with asyncio.timeout(self.policy.write_timeout_s), self._write_lock:
                self._check(child)
                if child.stdin_lost:
                    child.fail(UpstreamError(f"stdio server {self.name!r} closed its stdin"))
                    self._check(child)
                pipe = child.transport.get_pipe_transport(0) if child.transport else None
                if not isinstance(pipe, asyncio.WriteTransport):
                    raise UpstreamError(f"stdio server {self.name!r} has no stdin")
                pipe.write(line + b"\n")
                if touch:
                    self.touch()
                await child.writable.wait()
                self._check(child)
        except TimeoutError:
            limit = self.policy.write_timeout_s
            error = UpstreamError(
                f"stdio server {self.name!r} did not read its input within {limit:g}s",
                reason="upstream_timeout",
            )
            child.fail(error)
            raise child.error or error from None

    async def read_line(self, *, touch: bool = True) -> bytes:
        """The next JSON-looking stdout line (without its newline).

        ``touch=False``: the caller decides whether the line was traffic (see ``touch``).

        Raises ``UpstreamError`` once the child is over: ``upstream_unavailable`` after a crash
        or stop (within about a second of the exit), ``upstream_too_large`` after an
        over-long line, ``upstream_timeout`` when it never answered. The caller bounds the wait.
        """
        child = self._live_child()
        while True:
            line = child.take_line()
            if line is not None:
                if touch:
                    self.touch()
                return line
            self._check(child)
            await child.readable.wait()

    async def stop(self, reason: str = "stopped") -> None:
        """Close stdin → SIGTERM → SIGKILL on the process group; waits until it is reaped."""
        child = self._child
        if child is not None:
            child.end(UpstreamError(f"stdio server {self.name!r} {reason}"), failed=False)
            child.terminate()
        await self._terminated()

    async def aclose(self) -> None:
        """Stop for good: the child, every stop still under way, then the watchers."""
        self._closed = True
        await self.stop("shut down")
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- internals -------------------------------------------------------------------------
    def _live_child(self) -> _Child:
        child = self._child
        if child is None:
            if self.state is State.CRASHED and self.last_error is not None:
                raise self.last_error.with_traceback(None)
            raise UpstreamError(f"stdio server {self.name!r} is not running")
        self._check(child)
        return child

    async def _terminated(self) -> None:
        """Wait for every stop under way (each is bounded by the policy's graces)."""
        while pending := [t for t in self._terminations if not t.done()]:
            await asyncio.shield(asyncio.gather(*pending, return_exceptions=True))

    @staticmethod
    def _check(child: _Child) -> None:
        # Every waiter raises the same error object: drop the old traceback so repeated
        # raises do not grow it.
        if child.error is not None:
            raise child.error.with_traceback(None)

    def _spawn_task(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("stdio %s: background task failed", self.name, exc_info=task.exception())

    async def _supervise(self, child: _Child) -> None:
        """Start timeout first, then the idle timeout; returns when the child is over."""
        # A cold start (npx fetching a package) is "starting", not a failure, until the
        # start timeout; the first JSON line (normally the initialize reply) ends it.
        try:
            async with asyncio.timeout(self.spec.start_timeout_s):
                await child.settled.wait()
        except TimeoutError:
            limit = self.spec.start_timeout_s
            message = f"stdio server {self.name!r} did not answer within {limit:g}s"
            child.fail(UpstreamError(message, reason="upstream_timeout"))
            return
        # The idle window opens when the child is ready: a start slower than the idle timeout
        # must not stop it before the call that started it is written (its handshake, a
        # ``server/discover``, is a probe and does not count as traffic).
        self._last_activity = max(self._last_activity, time.monotonic())
        idle = self.spec.idle_timeout_s
        while child.error is None:
            remaining = self._last_activity + idle - time.monotonic()
            if remaining <= 0:
                log.info("stdio %s: no traffic for %gs, stopping", self.name, idle)
                if child.end(UpstreamError(f"stdio server {self.name!r} stopped after idling"), failed=False):
                    await asyncio.shield(child.terminate())
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await child.ended.wait()

    def _child_answered(self, child: _Child) -> None:
        if child is self._child and self.state is State.STARTING:
            self.state = State.RUNNING

    def _child_ended(self, child: _Child, error: UpstreamError, *, failed: bool) -> None:
        if child is not self._child:
            return
        self._child = None
        if failed:
            log.warning("stdio %s: %s", self.name, error.public_message)
            self._record_failure(error, ran_for=self.clock() - child.spawned_at)
        else:
            self.state = State.STOPPED

    def _record_failure(self, error: UpstreamError, *, ran_for: float) -> None:
        # Exponential back-off between spawns caps a crash loop's fork rate; a child that
        # ran for a while before failing starts the count afresh.
        self._failures = 1 if ran_for >= self.policy.stable_after_s else self._failures + 1
        delay = min(self.policy.backoff_initial_s * 2 ** (self._failures - 1), self.policy.backoff_max_s)
        self._next_spawn_at = self.clock() + delay
        self.state = State.CRASHED
        self.last_error = error


class ProcessRegistry:
    """Owns every ``StdioProcess`` of the appliance; ``aclose()`` stops them all at shutdown."""

    def __init__(self, policy: StdioPolicy, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.clock = clock
        self._procs: dict[str, StdioProcess] = {}
        self._closed = False

    def get(self, name: str) -> StdioProcess | None:
        return self._procs.get(name)

    async def put(self, name: str, spec: StdioSpec) -> StdioProcess:
        """The process for ``name`` with this spec; a changed spec stops the old child."""
        if self._closed:
            raise UpstreamError("stdio servers are shutting down")
        current = self._procs.get(name)
        if current is not None and current.spec == spec:
            return current
        proc = StdioProcess(name, spec, self.policy, clock=self.clock)  # validates before the old one stops
        if current is not None:
            await current.aclose()
        self._procs[name] = proc
        return proc

    async def remove(self, name: str) -> None:
        proc = self._procs.pop(name, None)
        if proc is not None:
            await proc.aclose()

    async def aclose(self) -> None:
        """Stop every child concurrently; each stop is bounded by the policy's graces."""
        self._closed = True
        procs, self._procs = list(self._procs.values()), {}
        results = await asyncio.gather(*(p.aclose() for p in procs), return_exceptions=True)
        for proc, result in zip(procs, results, strict=True):
            if isinstance(result, BaseException):
                log.error("stdio %s: stop failed", proc.name, exc_info=result)
