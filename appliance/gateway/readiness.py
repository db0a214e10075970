"""Readiness: the database takes a write and its schema is the newest this build knows.

"Takes a write" is asked of the disk too (``db/space.py``): not ready while the data
directory's disk is under its floor of free space or a write failed and no probe write has
succeeded since (one is made here, so readiness comes back as soon as the disk does). The
``BEGIN IMMEDIATE`` below proves only that the write lock can be had: it writes nothing.
"""

from __future__ import annotations

from appliance.db.migrate import applied_versions, default_migrations_dir, discover
from appliance.errors import ApplianceError, ConfigError
from appliance.gateway.runtime import Runtime


async def problems(rt: Runtime) -> list[str]:
    found: list[str] = []
    if rt.db.storage.failing is not None:
        await rt.db.probe_write()
    unwritable = rt.db.storage.problem(fresh=True)
    if unwritable is not None:
        found.append(unwritable)
    try:
        async with rt.db.write() as tx:  # BEGIN IMMEDIATE proves the write lock can be had
            applied = await applied_versions(tx)
    except ApplianceError as exc:
        return [*found, f"database not writable: {exc.public_message}"]
    missing = [n for n, _, _ in discover(default_migrations_dir()) if n not in applied]
    if missing:
        found.append(f"migrations not applied: {missing}")
    return found


async def check_sound(rt: Runtime) -> None:
    """Before serving: a damaged database refuses to start, naming the file (CRASH-04).

    Opening already refuses a bad header or a truncated file; ``PRAGMA quick_check`` also
    reads every page, so a page overwritten in the middle is caught here rather than by the
    first call that touches it. Nothing is repaired, recreated or deleted: that is the
    operator's call (restore a backup), and a fresh database would reset quotas and grants.
    """
    found = await rt.db.quick_check()
    if found != ["ok"]:
        raise ConfigError(f"database {rt.db.path} is damaged: {'; '.join(found)}; restore it from a backup")
