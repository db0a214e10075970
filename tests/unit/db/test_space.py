"""Whether a call's accounting can be written (``db/space.py``), in-process: the floor of free
space, a failed write that stops calls until a real probe write succeeds (issue 16 item 10)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlean

from appliance.db import Database, SyncReader
from appliance.db.space import Storage
from appliance.errors import StorageError
from tests.unit.db.test_database import MIGRATIONS, with_db


def _failing_with(code: int, message: str) -> sqlean.OperationalError:
    exc = sqlean.OperationalError(message)
    exc.sqlite_errorcode = code  # as SQLite sets it on a real failure
    return exc


def test_a_floor_above_the_free_space_is_a_problem_and_one_below_is_none(tmp_path: Path) -> None:
    free = Storage(tmp_path, floor_bytes=1).free_bytes()
    assert free > 0
    assert Storage(tmp_path, floor_bytes=1).problem() is None
    problem = Storage(tmp_path, floor_bytes=free + 2**40).problem()
    assert problem is not None and "nearly full" in problem and "min_free_disk_bytes" in problem


@pytest.mark.parametrize(("code", "message"), [(13, "database or disk is full"), (10, "disk I/O error")])
def test_a_write_the_disk_failed_stops_calls_until_a_probe_write_succeeds(
    tmp_path: Path, code: int, message: str
) -> None:
    async def body(db: Database) -> None:
        assert db.storage.problem() is None

        def fails(r: SyncReader) -> None:
            raise _failing_with(code, message)

        with pytest.raises(StorageError):
            await db.write_batch(fails)
        problem = db.storage.problem()
        assert problem is not None and message in problem
        wal = Path(f"{db.path}-wal")
        before = wal.stat().st_size if wal.exists() else 0
        assert await db.probe_write()
        assert db.storage.problem() is None
        assert wal.stat().st_size > before  # the probe really wrote (a page through the WAL)

    with_db(tmp_path / "t.db", MIGRATIONS, body)


def test_a_held_lock_is_not_a_disk_failure(tmp_path: Path) -> None:
    async def body(db: Database) -> None:
        def busy(r: SyncReader) -> None:
            raise _failing_with(5, "database is locked")

        with pytest.raises(StorageError):
            await db.write_batch(busy)
        assert db.storage.failing is None and db.storage.problem() is None

    with_db(tmp_path / "t.db", MIGRATIONS, body)


def test_the_probe_leaves_the_database_as_it_was(tmp_path: Path) -> None:
    async def body(db: Database) -> int:
        generation = db.generation
        for _ in range(3):
            assert await db.probe_write()
        assert db.generation == generation  # nothing a cache derives from has changed
        async with db.read() as conn:
            return int((await conn.one("PRAGMA user_version"))[0])

    assert with_db(tmp_path / "t.db", MIGRATIONS, body) == 0
