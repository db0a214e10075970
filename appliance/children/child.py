"""One spawned stdio child: its pipes, its queued stdout lines, its end and its termination.

``StdioProcess`` (``processes.py``) owns the lifecycle and creates one ``Child`` per spawn;
the child is the protocol of the subprocess ``spawn.py`` starts: it splits stdout into lines (JSON only,
bounded, with back-pressure), keeps the last stderr lines (redacted), records why it ended
and stops its whole process group (stdin closed, SIGTERM, SIGKILL, then the group swept).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import deque
from typing import TYPE_CHECKING, cast

from appliance.children.spawn import ChildTransport
from appliance.errors import UpstreamError
from appliance.secret import redact_text

if TYPE_CHECKING:
    from appliance.children.processes import StdioProcess

# The supervisor's one logger, whichever module writes the line: operators (and the tests)
# follow a stdio server's output and lifecycle under this name.
log = logging.getLogger("appliance.children.processes")

# An exited child may still have bytes in the pipe; wait this long for stdout EOF before
# declaring the crash, so a reply written just before exit is delivered first. Short, so an
# in-flight reader hears of the crash within about a second (UP-08).
_DRAIN_GRACE_S = 0.5
_REAP_TIMEOUT_S = 5.0
_STDERR_LINE_CHARS = 2000
_ERROR_STDERR_LINES = 10
_LOG_LINES_PER_S = 50


def _exit_text(returncode: int | None, *, sandboxed: bool = False) -> str:
    if returncode is None:
        return "ended"
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-returncode).name}"
    if sandboxed and returncode > 128:
        # bwrap exits with 128 + N when the server it runs was killed by signal N (a limit:
        # SIGXCPU, SIGKILL at the hard CPU limit, SIGXFSZ): say which, as for a plain child.
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(returncode - 128).name} (in its sandbox)"
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


class Child(asyncio.SubprocessProtocol):
    """One spawned child: its pipes, its queued stdout lines, its end and its termination."""

    def __init__(self, owner: StdioProcess, generation: int) -> None:
        self.owner = owner
        self.name = owner.name
        self.policy = owner.policy
        self.line_limit = max(owner.policy.max_line_bytes, owner.spec.max_line_bytes or 0)
        self.generation = generation
        self.transport: ChildTransport | None = None
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
        self.transport = cast(ChildTransport, transport)  # spawn.py's, always
        self.pid = self.transport.get_pid()

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
        # its own variables, then every vault secret this process has loaded
        text = redact_text(self.owner.redactor.text(text))[:_STDERR_LINE_CHARS]
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
        found = self.transport.get_pipe_transport(1) if self.transport else None
        if found is None or found.is_closing():
            return
        pipe = cast(asyncio.ReadTransport, found)  # uvloop's pipes do not subclass asyncio's
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
        ended = _exit_text(self.returncode, sandboxed=self.policy.sandbox is not None)
        self.fail(UpstreamError(f"stdio server {self.name!r} {ended}"))

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
