"""Who uses a data directory: advisory ``flock`` locks that the OS drops with their process.

``toolspoke.lock`` is held *shared* by every process that opens the database (``serve``,
``stdio``, any CLI command) and *exclusively* by ``restore``, which swaps the database file
and must never do so under a process that has the old one open: its next commits would go
to a file nobody reads again. Several runners beside each other are a supported set-up (a
desktop client's ``toolspoke stdio`` next to ``toolspoke serve``, a CLI ``import`` while
serving: SQLite's WAL mode is made for it).

``serve.lock`` is held exclusively by ``serve`` alone, with its pid written in it: a second
``serve`` on the same data directory would keep its own in-memory book (spend checks and
reservations), start its own copies of every stdio server and run its own health probes and
re-syncs, so it is refused, naming the first.

A lock lives as long as its file descriptor: the kernel releases it when the process ends
in any way, ``kill -9`` included, so there is never a stale lock to clean up. The lock
files are 0600, created on first use and never removed (removing a locked file would let a
newcomer lock a fresh inode beside the holder).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from appliance.errors import ConfigError, Conflict

DATA_LOCK = "toolspoke.lock"
SERVE_LOCK = "serve.lock"


class Held:
    """One held lock; released by ``release`` (or at exit of the process, however it ends)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor of the open file drops its flock
            self._fd = None

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.release()


def _open(path: Path) -> int:
    # O_CLOEXEC (Python's default, stated): a stdio server spawned by `serve` must not inherit
    # the lock and keep it after `serve` died.
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot open the lock file {path}: {exc.strerror}", field="data_dir") from None
    if os.fstat(fd).st_mode & 0o077:
        os.fchmod(fd, 0o600)
    return fd


def _try(path: Path, mode: int) -> int | None:
    """The descriptor holding ``mode`` on ``path``, or None when someone else holds a conflicting lock."""
    fd = _open(path)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def runner(data_dir: Path) -> Held:
    """The shared hold of a process that opens the database; refused while a restore runs."""
    fd = _try(data_dir / DATA_LOCK, fcntl.LOCK_SH)
    if fd is None:
        raise Conflict(
            f"a restore is in progress on {data_dir}; start again once it has finished", field="data_dir"
        )
    return Held(fd)


def server(data_dir: Path) -> Held:
    """``serve``'s own lock: one ``serve`` per data directory, its pid on record."""
    path = data_dir / SERVE_LOCK
    fd = _try(path, fcntl.LOCK_EX)
    if fd is None:
        raise Conflict(
            f"toolspoke serve is already running on {data_dir} ({_pid(path)}); two would each keep "
            "their own spend book and start their own stdio servers. Stop it first, or give this "
            "one another data directory",
            field="data_dir",
        )
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return Held(fd)


def sole(data_dir: Path) -> Held:
    """The exclusive hold ``restore`` needs: nothing else may have the database open."""
    fd = _try(data_dir / DATA_LOCK, fcntl.LOCK_EX)
    if fd is None:
        raise Conflict(
            f"toolspoke is running on {data_dir} ({_who(data_dir)}); stop it first: the database "
            "cannot be replaced under a process that has it open. Nothing was changed",
            field="data_dir",
        )
    return Held(fd)


def _who(data_dir: Path) -> str:
    path = data_dir / SERVE_LOCK
    if not path.exists():
        return "toolspoke stdio or another toolspoke command"
    probe = _try(path, fcntl.LOCK_SH)
    if probe is None:
        return f"toolspoke serve, {_pid(path)}"
    os.close(probe)
    return "toolspoke stdio or another toolspoke command"


def _pid(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return f"pid {text}" if text.isdigit() else "pid unknown"
