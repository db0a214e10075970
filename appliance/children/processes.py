"""Local stdio MCP servers: spawn, feed, watch and stop one child process per toolkit.

This is a line channel and nothing more: bytes in on stdin, lines out of stdout. JSON-RPC
meaning (ids, initialize, cancellation) belongs to the session layer above it. What may be
run is decided in ``stdio_spec.py``; one spawned child's pipes and termination live in
``stdio_child.py``.

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
stdin, then SIGTERM, then SIGKILL. The direct child is spawned and reaped by ``spawn.py``
(Popen, a pidfd, ``waitpid``), the same on the stock asyncio loop and on uvloop;
grandchildren are reparented to init when the leader dies, and init reaps them.

The child's environment is exactly ``policy.base_env`` plus ``spec.env`` (RELIABILITY A9,
VAULT-08): nothing else of the gateway's environment, where the master key may live.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, cast

from appliance.children.child import Child as _Child
from appliance.children.sandbox import Installed, Launch, Sandbox, package_install
from appliance.children.spawn import spawn
from appliance.children.spec import (  # noqa: F401 - re-exported: callers import them from here
    DEFAULT_ALLOWED_EXECUTABLES,
    DEFAULT_MAX_LINE_BYTES,
    ProxyHandle,
    State,
    StdioPolicy,
    StdioSpec,
    StdioSpecRejected,
    check_spec,
    registry_hosts,
)
from appliance.errors import UpstreamError
from appliance.secret import Redactor, redact_text

log = logging.getLogger(__name__)


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
        self._proxy: ProxyHandle | None = None  # the egress proxy of its allowed hosts

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

    async def still_running(self) -> bool:
        """Whether the current child is live, the kernel asked now.

        The loop learns of an exit one turn later (the pidfd's readiness) and the crash is
        recorded after the drain grace; a caller about to send in between would write to a
        dead child and fail a call that could have restarted it. A child found exited is
        handled here as the watch would have handled it, and this returns once the crash is
        recorded (within the drain grace), so the caller restarts it within the back-off.
        """
        child = self._child
        if child is None or child.error is not None:
            return False
        if child.transport is None or not child.transport.poll_exit():
            return True
        await child.ended.wait()  # set by the exit's handling, within the drain grace
        return False

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
                # Rounded up, so a refusal never says "retry in 0.0s" (which reads as "now").
                raise UpstreamError(
                    f"stdio server {self.name!r} is restarting after a failure;"
                    f" retry in {math.ceil(wait * 10) / 10:.1f}s",
                    data={**data, "retry_after_s": max(round(wait, 3), 0.001)},
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
        sandbox = self.policy.sandbox
        if sandbox is None and self.policy.sandbox_refusal:
            self._spawn_failed(self.policy.sandbox_refusal)
        child = _Child(self, self.generation)
        # Current before the exec: an instant crash reports to this process, not to nobody.
        self._child = self._last_child = child
        self.state = State.STARTING
        try:
            if sandbox is None:
                self.cwd.mkdir(parents=True, exist_ok=True, mode=0o700)
                launch = Launch([executable, *self.spec.args], env)
            else:
                launch = await self._sandboxed(sandbox, executable, env)
            await spawn(child, launch.argv, env=launch.env, cwd=self.cwd)
        except (OSError, UpstreamError) as exc:
            self._child = None
            if isinstance(exc, UpstreamError):
                self._record_failure(exc, ran_for=0.0)
                raise
            self._spawn_failed(f"cannot start {self.spec.command!r}: {exc.strerror or exc}")
            return
        self.touch()
        log.info("stdio %s: started pid %d (generation %d)", self.name, child.pid, child.generation)
        self._spawn_task(self._supervise(child))

    async def _sandboxed(self, sandbox: Sandbox, executable: str, env: dict[str, str]) -> Launch:
        """The confined launch; first, the package an ``npx``/``uvx`` server fetches is
        installed into the toolkit's caches (once, its registry reached through the egress
        proxy), as the run has no registry."""
        # Beside the work directories, never one of them: a toolkit name starts with a letter
        # or a digit, so ``.home`` is nobody's work directory.
        owner = self.spec.home or self.name
        root = self.policy.workdir_root.resolve()
        home = root / ".home" / owner
        await asyncio.to_thread(sandbox.prepare, owner, home, self.cwd)
        for arg in self.spec.args:
            if arg.startswith("/") and sandbox.hidden(arg):
                log.warning(
                    "stdio %s: %s is not visible in the sandbox (see sandbox_read_paths)", self.name, arg
                )
        install = package_install(executable, self.spec.args)
        installed = Installed(root)
        if install is not None and not installed.has(owner, install, home):
            hosts = [*self.policy.install_hosts, *registry_hosts(env)]
            async with self._egress_proxy(sandbox, owner, hosts, "install") as proxy:
                install_env = {**env, **sandbox.environment(home, install=True, proxied=proxy is not None)}
                try:
                    await self._install(sandbox, owner, install, install_env, home, proxy)
                except UpstreamError as exc:
                    if proxy is not None and proxy.refused:  # the likeliest cause, said first
                        exc.public_message += f"; its egress proxy refused {proxy.refused[-1]}"
                        exc.args = (exc.public_message,)
                    raise
        proxied = bool(self.spec.allow_hosts)
        if proxied and self._proxy is None:
            self._proxy = await self._open_proxy(sandbox, owner, self.spec.allow_hosts, "run")
        env = {**env, **sandbox.environment(home, proxied=proxied), **self.spec.env}
        env.update((k, v.reveal()) for k, v in self.spec.secret_env.items())
        proxy_path = self._proxy.path if proxied and self._proxy is not None else None
        return sandbox.launch(
            owner, [executable, *self.spec.args], env, home=home, cwd=self.cwd, proxy=proxy_path
        )

    async def _open_proxy(self, sandbox: Sandbox, owner: str, hosts: Sequence[str], use: str) -> ProxyHandle:
        egress = self.policy.egress
        if egress is None or not sandbox.python:
            raise UpstreamError(
                f"stdio server {self.name!r} has allowed hosts, but this gateway has no egress proxy"
                " for its sandbox (python3 is needed inside it; see toolspoke doctor)"
            )
        # A short name: a unix socket's path is at most 107 bytes.
        digest = hashlib.sha256(f"{self.name}\0{use}".encode()).hexdigest()[:16]
        folder = self.policy.workdir_root.resolve() / ".proxy"
        folder.mkdir(mode=0o700, exist_ok=True)
        try:
            return await egress.serve(owner, hosts, folder / f"{digest}.sock", uid=sandbox.uid_of(owner))
        except OSError as exc:
            raise UpstreamError(
                f"stdio server {self.name!r}: its egress proxy cannot listen: {exc}"
            ) from None

    @contextlib.asynccontextmanager
    async def _egress_proxy(
        self, sandbox: Sandbox, owner: str, hosts: Sequence[str], use: str
    ) -> AsyncIterator[ProxyHandle | None]:
        """A proxy for the duration of an install; None (no network) without one."""
        if self.policy.egress is None or not sandbox.python or not hosts:
            yield None
            return
        proxy = await self._open_proxy(sandbox, owner, hosts, use)
        try:
            yield proxy
        finally:
            await proxy.aclose()

    async def _install(
        self,
        sandbox: Sandbox,
        owner: str,
        command: list[str],
        env: dict[str, str],
        home: Path,
        proxy: ProxyHandle | None,
    ) -> None:
        log.info("stdio %s: installing its package into its own cache: %s", self.name, " ".join(command))
        path = proxy.path if proxy is not None else None
        launch = sandbox.launch(owner, command, env, home=home, cwd=self.cwd, proxy=path)
        try:
            done = await asyncio.to_thread(
                subprocess.run,
                launch.argv,
                env=launch.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.spec.start_timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            limit = self.spec.start_timeout_s
            raise UpstreamError(
                f"stdio server {self.name!r}: installing its package took over {limit:g}s",
                reason="upstream_timeout",
            ) from None
        if done.returncode != 0:
            tail = self.redactor.text(done.stderr.decode("utf-8", "replace"))[-1500:]
            raise UpstreamError(
                f"stdio server {self.name!r}: installing its package failed (exit {done.returncode})",
                data={"exit_status": done.returncode, "stderr": redact_text(tail).splitlines()[-10:]},
            )
        Installed(self.policy.workdir_root.resolve()).record(owner, command, home)

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
                if pipe is None:  # not isinstance: uvloop's pipes do not subclass asyncio's
                    raise UpstreamError(f"stdio server {self.name!r} has no stdin")
                cast(asyncio.WriteTransport, pipe).write(line + b"\n")
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
        if self._proxy is not None:  # opened again by the next start
            proxy, self._proxy = self._proxy, None
            await proxy.aclose()

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
        disk = self.policy.sandbox.disk if self.policy.sandbox is not None else None
        if disk is not None:
            await asyncio.to_thread(disk.release)
