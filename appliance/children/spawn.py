"""Spawn a child with ``subprocess.Popen`` and supervise it on any asyncio event loop.

``loop.subprocess_exec`` behaves differently per loop implementation: uvloop does not honour
``close_fds`` (the child inherits every inheritable descriptor, VAULT-08), reports exec
failures late and orders its callbacks otherwise. So the stdio supervisor spawns the child
itself (argv list, no shell, ``close_fds``, its own session) and gives the loop only what
every loop does alike: three pipes (``connect_read_pipe`` / ``connect_write_pipe``) and one
readable descriptor, the child's pidfd, which becomes readable when it exits. Then the child
is reaped with ``waitpid`` (``Popen.poll``): no zombie, and no child watcher involved.

``ChildTransport`` offers the ``SubprocessTransport`` surface the protocol uses (``get_pid``,
``get_returncode``, ``get_pipe_transport``, ``close``) and calls a ``SubprocessProtocol``'s
``connection_made``, ``pipe_data_received``, ``pipe_connection_lost``, ``process_exited``,
``connection_lost``. Without ``os.pidfd_open`` (Linux < 5.3, or not Linux) the exit is found
by polling ``waitpid`` every ``_POLL_S``: a bounded delay, and the only cost is one syscall.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, cast

# Exit polling when the kernel has no pidfd: a crash is still noticed well within a second.
_POLL_S = 0.1


def _transport_file(loop: asyncio.AbstractEventLoop, stream: IO[bytes]) -> IO[bytes]:
    """The pipe file to hand ``connect_*_pipe``: one whose descriptor is closed exactly once.

    The stock loop's pipe transport closes the file it was given: that file is ``stream``.
    uvloop's has libuv close the descriptor and then closes the file object as well, a
    second close of the same number. It fails with EBADF, unless another thread (SQLite's,
    a log writer's) opened a file between the two and was given that number: then it is
    that file that gets closed. So under uvloop the transport gets a duplicate of the
    descriptor wrapped in a file that does not own it (``closefd=False``), and ``stream``
    is closed here, by its owner, once.
    """
    if type(loop).__module__.split(".", 1)[0] != "uvloop":
        return stream
    fd = os.dup(stream.fileno())  # non-inheritable, as Popen's own ends
    try:
        wrapper = open(fd, "wb" if stream.writable() else "rb", buffering=0, closefd=False)  # noqa: SIM115
    except BaseException:
        os.close(fd)
        raise
    stream.close()
    return wrapper


def _pidfd_open(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits; None where the kernel has none."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return cast(int, opener(pid))
    except OSError:  # ENOSYS: Linux < 5.3; EPERM/EINVAL under some sandboxes
        return None


class _PipeProtocol(asyncio.Protocol):
    """One pipe's events, passed on to the child's protocol with the pipe's fd number."""

    def __init__(self, owner: ChildTransport, fd: int) -> None:
        self.owner = owner
        self.fd = fd

    def data_received(self, data: bytes) -> None:
        self.owner._protocol.pipe_data_received(self.fd, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._pipe_lost(self.fd, exc)

    def pause_writing(self) -> None:
        self.owner._protocol.pause_writing()

    def resume_writing(self) -> None:
        self.owner._protocol.resume_writing()


class ChildTransport(asyncio.SubprocessTransport):
    """A spawned child, its three pipe transports and its exit watch."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol: asyncio.SubprocessProtocol,
        popen: subprocess.Popen[bytes],
    ) -> None:
        super().__init__()
        self._loop = loop
        self._protocol = protocol
        self._popen = popen
        self._pipes: dict[int, asyncio.BaseTransport] = {}
        self._open_pipes: set[int] = set()
        self._pidfd: int | None = None
        self._poll: asyncio.TimerHandle | None = None
        self._returncode: int | None = None
        self._closed = False
        self._finished = False

    # -- the SubprocessTransport surface ---------------------------------------------------
    def get_pid(self) -> int:
        return self._popen.pid

    def get_returncode(self) -> int | None:
        return self._returncode

    def get_pipe_transport(self, fd: int) -> asyncio.BaseTransport | None:
        return self._pipes.get(fd)

    def is_closing(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close our pipe ends; a child still running is killed, and reaped when it exits."""
        if self._closed:
            return
        self._closed = True
        for pipe in list(self._pipes.values()):
            pipe.close()
        if self._returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._popen.pid, signal.SIGKILL)

    def send_signal(self, signal: int) -> None:
        if self._returncode is None:
            self._popen.send_signal(signal)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    # -- wiring ------------------------------------------------------------------------------
    def _pipe_protocol(self, fd: int) -> Callable[[], _PipeProtocol]:
        return lambda: _PipeProtocol(self, fd)

    def _attach(self, fd: int, pipe: asyncio.BaseTransport) -> None:
        self._pipes[fd] = pipe
        self._open_pipes.add(fd)
        if self._closed:  # closed while the pipes were being connected
            pipe.close()

    def _pipe_lost(self, fd: int, exc: Exception | None) -> None:
        self._open_pipes.discard(fd)
        self._protocol.pipe_connection_lost(fd, exc)
        self._try_finish()

    def _watch_exit(self) -> None:
        self._pidfd = _pidfd_open(self._popen.pid)
        if self._pidfd is not None:
            self._loop.add_reader(self._pidfd, self._check_exit)
        else:
            self._check_exit()

    def poll_exit(self) -> bool:
        """Whether the child has exited, asked of the kernel now rather than waiting for the
        loop to deliver the pidfd's readiness (or the next poll): a caller about to use the
        child learns of an exit that has happened but not been handled yet, and the exit is
        then handled exactly as the watch would have (reaped, ``process_exited``)."""
        if self._returncode is None:
            returncode = self._popen.poll()  # waitpid(WNOHANG): reaps the child
            if returncode is not None:
                self._exited(returncode)
        return self._returncode is not None

    def _check_exit(self) -> None:
        self._poll = None
        if self._returncode is not None:
            return  # handled already, by ``poll_exit``
        returncode = self._popen.poll()  # waitpid(WNOHANG): reaps the child
        if returncode is None:
            if self._pidfd is None:
                self._poll = self._loop.call_later(_POLL_S, self._check_exit)
            return
        self._exited(returncode)

    def _exited(self, returncode: int) -> None:
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None
        self._returncode = returncode
        self._protocol.process_exited()
        self._try_finish()

    def _try_finish(self) -> None:
        if self._finished or self._returncode is None or self._open_pipes:
            return
        self._finished = True
        self._protocol.connection_lost(None)

    def _abandon(self) -> None:
        """Spawned but not wired up (a pipe could not be connected): kill, reap, close all."""
        self.close()
        for stream in (self._popen.stdin, self._popen.stdout, self._popen.stderr):
            if stream is not None:
                stream.close()
        # Just SIGKILLed, so at once; a child stuck in the kernel is left to Popen, which
        # reaps it when a later Popen is made, rather than block the loop.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._returncode = self._popen.wait(timeout=1.0)


async def spawn(
    protocol: asyncio.SubprocessProtocol,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
) -> ChildTransport:
    """Start ``argv`` (no shell) in its own session with three pipes; attach it to ``protocol``.

    An executable that cannot be run raises ``OSError`` here (ENOENT, EACCES, ENOEXEC), as
    the exec failure is reported through Popen's error pipe before it returns.
    """
    loop = asyncio.get_running_loop()
    # In the loop thread, as the stock loop's subprocess_exec does: fork/exec costs the same,
    # and the exec failure is known before this returns.
    popen = subprocess.Popen(  # noqa: ASYNC220
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        close_fds=True,
        start_new_session=True,
        shell=False,
    )
    transport = ChildTransport(loop, protocol, popen)
    protocol.connection_made(transport)
    try:
        # The pipe transports own the pipe files from here (each closes its file).
        assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
        stdin, _ = await loop.connect_write_pipe(
            transport._pipe_protocol(0), _transport_file(loop, popen.stdin)
        )
        transport._attach(0, stdin)
        stdout, _ = await loop.connect_read_pipe(
            transport._pipe_protocol(1), _transport_file(loop, popen.stdout)
        )
        transport._attach(1, stdout)
        stderr, _ = await loop.connect_read_pipe(
            transport._pipe_protocol(2), _transport_file(loop, popen.stderr)
        )
        transport._attach(2, stderr)
    except BaseException:
        transport._abandon()
        raise
    popen.stdin = popen.stdout = popen.stderr = None  # not Popen's to close any more
    transport._watch_exit()
    return transport
