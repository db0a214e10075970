"""Online backups of the live database: one consistent snapshot, checked, then put in place.

Why ``VACUUM INTO`` and not a file copy: a copy of a live WAL database taken while a
writer commits mixes pages of different transactions, and the ``-wal`` file holds commits
the main file does not yet have (sqlite.org, "How To Corrupt An SQLite Database File").
``VACUUM INTO`` reads the database in one read transaction, so it writes exactly one
committed state; in WAL mode that read blocks no writer, so a serving appliance keeps
answering, and the time it takes is bounded by the database's size, never by the load
(the page-stepping backup API restarts whenever another connection writes, so under a
steady stream of calls it may never finish).

The copy is written beside the target under a temporary name created 0600 (it holds the
sealed vault: the data keys, sealed under the master key, and every sealed credential),
checked with ``PRAGMA integrity_check``, fsynced, and only then linked to the target name
(refusing an existing file) or, with ``force``, renamed over it. A failure at any point
leaves no partial file under the target's name.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import sqlean

from appliance.db.connection import _connect
from appliance.errors import ApplianceError, ConfigError, Conflict, InvalidParams


@dataclass(frozen=True)
class BackupReport:
    path: str
    bytes: int
    seconds: float
    schema_version: int


def backup(source: Path, target: Path, *, force: bool = False) -> BackupReport:
    """Write a consistent copy of the database ``source`` to ``target`` (blocking: run it in a thread)."""
    started = time.monotonic()
    if not source.is_file():
        raise ConfigError(f"no database at {source}: nothing to back up", field="data_dir")
    target = Path(os.path.abspath(target))
    _check_target(source, target, force=force)
    partial = target.parent / f".{target.name}.{secrets.token_hex(4)}.partial"
    # O_EXCL and 0600 from the first byte: VACUUM INTO accepts an empty file and keeps its mode.
    os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    try:
        _snapshot(source, partial)
        version = _verify(partial)
        fsync_path(partial)
        if force:
            os.replace(partial, target)
        else:
            try:
                os.link(partial, target)  # atomic: fails if the name was taken meanwhile
            except FileExistsError:
                raise Conflict(f"{target} exists; pass --force to replace it", field="path") from None
            os.unlink(partial)
        fsync_path(target.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
    return BackupReport(str(target), target.stat().st_size, time.monotonic() - started, version)


def _check_target(source: Path, target: Path, *, force: bool) -> None:
    if not target.parent.is_dir():
        raise InvalidParams(f"directory {target.parent} does not exist", field="path")
    live = {os.path.abspath(p) for p in (source, f"{source}-wal", f"{source}-shm", f"{source}-journal")}
    if str(target) in live or (target.exists() and target.samefile(source)):
        raise InvalidParams(f"{target} is the live database itself", field="path")
    if target.is_dir():
        raise InvalidParams(f"{target} is a directory; name the backup file", field="path")
    if target.exists() and not force:
        raise Conflict(f"{target} exists; pass --force to replace it", field="path")


def _snapshot(source: Path, into: Path) -> None:
    conn = _connect(str(source), writer=False)
    try:
        # query_only refuses VACUUM INTO; this connection never writes the source all the same.
        conn.execute("PRAGMA query_only = OFF")
        conn.execute("VACUUM INTO ?", (str(into),))
    except sqlean.Error as exc:
        raise ApplianceError(f"backup of {source} failed: {exc}") from None
    finally:
        conn.close()


def _verify(path: Path) -> int:
    """The copy's own ``integrity_check`` and ``foreign_key_check`` must pass; its schema version."""
    conn = _connect(str(path), writer=False)
    try:
        problems = [str(r[0]) for r in conn.execute("PRAGMA integrity_check(5)")]
        if problems != ["ok"]:
            raise ApplianceError(f"the backup failed its integrity check: {'; '.join(problems)}")
        if conn.execute("PRAGMA foreign_key_check").fetchone() is not None:
            raise ApplianceError("the backup failed its foreign key check")
        row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
        return int(row[0])
    except sqlean.Error as exc:
        raise ApplianceError(f"the backup could not be checked: {exc}") from None
    finally:
        conn.close()


def remove_leftovers(directory: Path, prefix: str) -> list[str]:
    """Remove the copies named ``<prefix>*`` in ``directory`` and their partial files
    (``.<name>.<random>.partial``, as ``backup`` names them); the names removed."""
    removed = []
    for path in [*directory.glob(f"{prefix}*"), *directory.glob(f".{prefix}*.partial")]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path.name)
    return removed


def fsync_path(path: Path) -> None:
    """Make a file's bytes, or a directory's entries, durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
