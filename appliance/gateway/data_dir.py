"""Who holds the data directory, and the database copies made of it: backup and restore.

Every face that opens the database holds the data directory's shared lock while it does
(``hold_runner``); ``serve`` also takes the one-serve-per-directory lock (``hold_serving``).
``restore`` takes the directory alone (``restore_from``): it is refused while anything else
holds it, and a command started during a restore is refused. The faces (``cli/``, ``web/``)
reach these through here, so the order (lock, stage, check the vault opens, swap, clean up)
is written once.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path

from appliance.config import Settings
from appliance.db import locks
from appliance.db import restore as db_restore
from appliance.db.backup import BackupReport, backup, remove_leftovers
from appliance.db.locks import Held
from appliance.errors import ApplianceError
from appliance.vault import keyring

__all__ = [
    "BackupReport",
    "Held",
    "RestoreReport",
    "backup_to",
    "copy_for_download",
    "hold_runner",
    "hold_serving",
    "remove_leftovers",
    "restore_from",
]


def _made(settings: Settings) -> Path:
    data = Path(settings.data_dir)
    data.mkdir(parents=True, exist_ok=True, mode=0o700)
    return data


def hold_runner(settings: Settings) -> Held:
    """The shared hold a process keeps while its database is open (creates the directory)."""
    return locks.runner(_made(settings))


def hold_serving(settings: Settings) -> list[Held]:
    """The runner's shared hold and the one-serve-per-data-dir lock, both or neither."""
    data = _made(settings)
    held: list[Held] = []
    try:
        held.append(locks.runner(data))
        held.append(locks.server(data))
    except ApplianceError:
        for lock in held:
            lock.release()
        raise
    return held


def backup_to(settings: Settings, path: Path, *, force: bool = False) -> BackupReport:
    """A consistent copy of the live database at ``path`` (blocking: serving may go on)."""
    return backup(settings.db_path, path, force=force)


async def copy_for_download(lock: asyncio.Lock, settings: Settings, copy: Path) -> BackupReport:
    """The copy, made under ``lock``, one at a time. Cancelled (the client went away), the copy
    is removed as soon as the thread has made it, and the lock is held until then: a thread
    cannot be stopped, and a copy landing after its handler had gone would stay."""
    async with lock:
        work = asyncio.get_running_loop().run_in_executor(None, backup, settings.db_path, copy)
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            # The callback removes the copy even if this coroutine is cancelled again below.
            work.add_done_callback(lambda _: copy.unlink(missing_ok=True))
            while not work.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait([work])
            raise


@dataclass(frozen=True)
class RestoreReport:
    path: Path
    bytes: int
    schema_version: int
    kept: Path | None  # the previous database, kept beside it; None if there was none


def restore_from(settings: Settings, backup_path: Path) -> RestoreReport:
    """Replace the database with a checked ``backup_path``, the data directory held alone.

    The backup is staged and checked (integrity, schema, and that the configured master key
    opens its vault) before anything changes; then one rename puts it in place, so a kill at
    any point leaves the old or the new database. A refused restore into a directory that did
    not exist leaves no trace. ApplianceError (ConfigError for the master key) names the fault.
    """
    data = Path(settings.data_dir)
    created = not data.exists()
    data.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        with locks.sole(data):
            staged = db_restore.stage(backup_path, settings.db_path)
            try:
                keyring.check_opens(settings, staged.vault_keys, staged.sealed)
                kept = db_restore.swap(staged, settings.db_path)
            finally:
                db_restore.discard(staged.path)  # gone already once swapped
    except (ApplianceError, OSError) as exc:
        if created:
            (data / locks.DATA_LOCK).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                data.rmdir()
        if isinstance(exc, OSError):  # the disk, not the backup: the old or the new database is in place
            raise ApplianceError(f"restore failed: {exc}") from exc
        raise
    return RestoreReport(settings.db_path, staged.size, staged.schema_version, kept)
