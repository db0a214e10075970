"""The database layer in-process: migrations, capability checks, the one writer, the readers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlean

from appliance.db import Database, SyncReader
from appliance.db.connection import check_capabilities
from appliance.db.migrate import apply_migrations, default_migrations_dir, discover
from appliance.errors import ConfigError, StorageError

T = TypeVar("T")
MIGRATIONS = default_migrations_dir()


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


def with_db(path: Path, migrations: Path, body: Callable[[Database], Awaitable[T]], readers: int = 2) -> T:
    async def main() -> T:
        db = Database(path)
        await db.open(migrations, readers=readers)
        try:
            return await body(db)
        finally:
            await db.close()

    return run(main())


def open_only(path: Path, migrations: Path) -> None:
    async def nothing(db: Database) -> None:
        return None

    with_db(path, migrations, nothing)


def raw_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlean.connect(str(path))
    try:
        return [tuple(r) for r in conn.execute(sql).fetchall()]
    finally:
        conn.close()


def tables(path: Path) -> set[str]:
    return {r[0] for r in raw_rows(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def migrations_dir(tmp_path: Path, files: dict[str, str]) -> Path:
    directory = tmp_path / "migrations"
    directory.mkdir(exist_ok=True)
    for old in directory.glob("*.sql"):
        old.unlink()
    for name, sql in files.items():
        (directory / name).write_text(sql)
    return directory


ONE = "CREATE TABLE alpha (id INTEGER PRIMARY KEY, v TEXT);\nINSERT INTO alpha (v) VALUES ('seed');\n"
TWO_GOOD = "CREATE TABLE beta (id INTEGER PRIMARY KEY);\n"
TWO_FAILING = "CREATE TABLE beta (id INTEGER PRIMARY KEY);\nINSERT INTO no_such_table VALUES (1);\n"


# -- migrations -----------------------------------------------------------------------------


def test_migrations_are_recorded_and_not_reapplied_on_reopen(tmp_path: Path) -> None:
    db_path = tmp_path / "t.db"
    open_only(db_path, MIGRATIONS)
    first = raw_rows(db_path, "SELECT version, name, applied_at FROM schema_migrations")
    shipped = [(number, name) for number, name, _ in discover(MIGRATIONS)]
    assert [(v, n) for v, n, _ in first] == shipped
    assert shipped[0] == (1, "initial")

    open_only(db_path, MIGRATIONS)
    assert raw_rows(db_path, "SELECT version, name, applied_at FROM schema_migrations") == first
    # 0001 seeds the default project; a second application would have failed or duplicated it.
    assert raw_rows(db_path, "SELECT slug FROM projects") == [("default",)]


def test_apply_migrations_returns_only_what_it_applied_now(tmp_path: Path) -> None:
    directory = migrations_dir(tmp_path, {"0001_one.sql": ONE})
    conn = sqlean.connect(str(tmp_path / "t.db"), isolation_level=None)
    try:
        assert apply_migrations(conn, directory) == [1]
        assert apply_migrations(conn, directory) == []
        (directory / "0002_two.sql").write_text(TWO_GOOD)
        assert apply_migrations(conn, directory) == [2]
        assert conn.execute("SELECT count(*) FROM alpha").fetchone()[0] == 1
    finally:
        conn.close()


def test_a_failing_migration_leaves_neither_its_tables_nor_its_record(tmp_path: Path) -> None:
    db_path = tmp_path / "t.db"
    directory = migrations_dir(tmp_path, {"0001_one.sql": ONE, "0002_two.sql": TWO_FAILING})
    with pytest.raises(ConfigError) as caught:
        open_only(db_path, directory)
    assert "0002_two.sql" in caught.value.public_message

    assert "alpha" in tables(db_path)
    assert "beta" not in tables(db_path)
    assert raw_rows(db_path, "SELECT version FROM schema_migrations") == [(1,)]

    # Once the migration is fixed, the next start applies it (and only it).
    (directory / "0002_two.sql").write_text(TWO_GOOD)
    open_only(db_path, directory)
    assert "beta" in tables(db_path)
    assert raw_rows(db_path, "SELECT version FROM schema_migrations ORDER BY version") == [(1,), (2,)]
    assert raw_rows(db_path, "SELECT v FROM alpha") == [("seed",)]


def test_a_migration_ending_in_an_incomplete_statement_applies_nothing(tmp_path: Path) -> None:
    db_path = tmp_path / "t.db"
    directory = migrations_dir(
        tmp_path, {"0001_one.sql": ONE, "0002_two.sql": TWO_GOOD + "CREATE TABLE gamma (id INTEGER"}
    )
    with pytest.raises(ConfigError, match="incomplete"):
        open_only(db_path, directory)
    assert not {"beta", "gamma"} & tables(db_path)
    assert raw_rows(db_path, "SELECT version FROM schema_migrations") == [(1,)]


def test_a_refused_migration_leaves_no_transaction_open_on_the_connection(tmp_path: Path) -> None:
    conn = sqlean.connect(str(tmp_path / "t.db"), isolation_level=None)
    try:
        for broken in (TWO_FAILING, TWO_GOOD + "CREATE TABLE gamma (id INTEGER"):
            directory = migrations_dir(tmp_path, {"0001_one.sql": ONE, "0002_two.sql": broken})
            with pytest.raises(ConfigError, match=r"0002_two\.sql|incomplete"):
                apply_migrations(conn, directory)
            assert not conn.in_transaction
            assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == 1
    finally:
        conn.close()


def test_a_gap_in_migration_numbers_is_refused(tmp_path: Path) -> None:
    db_path = tmp_path / "t.db"
    directory = migrations_dir(tmp_path, {"0001_one.sql": ONE, "0003_three.sql": TWO_GOOD})
    with pytest.raises(ConfigError, match="gaps"):
        open_only(db_path, directory)
    assert "alpha" not in tables(db_path)


def test_a_badly_named_migration_file_is_refused(tmp_path: Path) -> None:
    directory = migrations_dir(tmp_path, {"0001_one.sql": ONE, "2_Two.sql": TWO_GOOD})
    with pytest.raises(ConfigError, match=r"2_Two\.sql"):
        open_only(tmp_path / "t.db", directory)


def test_a_database_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    db_path = tmp_path / "t.db"
    newer = migrations_dir(tmp_path, {"0001_one.sql": ONE, "0002_two.sql": TWO_GOOD})
    open_only(db_path, newer)
    older = migrations_dir(tmp_path, {"0001_one.sql": ONE})
    with pytest.raises(ConfigError, match="newer") as caught:
        open_only(db_path, older)
    assert "2" in caught.value.public_message
    assert raw_rows(db_path, "SELECT version FROM schema_migrations ORDER BY version") == [(1,), (2,)]


def test_a_missing_migrations_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="missing"):
        open_only(tmp_path / "t.db", tmp_path / "nowhere")


# -- capabilities ---------------------------------------------------------------------------


def test_check_capabilities_names_vec_when_sqlite_vec_is_not_loaded() -> None:
    conn = sqlean.connect(":memory:")
    try:
        with pytest.raises(ConfigError) as caught:
            check_capabilities(conn)
    finally:
        conn.close()
    assert "vec" in caught.value.public_message


def test_an_opened_database_has_fts5_vec0_wal_and_foreign_keys(tmp_path: Path) -> None:
    async def body(db: Database) -> tuple[Any, ...]:
        async with db.write() as tx:
            mode = (await tx.one("PRAGMA journal_mode"))[0]
            fks = (await tx.one("PRAGMA foreign_keys"))[0]
            vec = (await tx.one("SELECT vec_version()"))[0]
        return mode, fks, vec

    mode, fks, vec = with_db(tmp_path / "t.db", MIGRATIONS, body)
    assert (mode, fks) == ("wal", 1)
    assert isinstance(vec, str) and vec


# -- the writer and the readers -------------------------------------------------------------


def test_twenty_concurrent_writers_each_commit_their_own_transaction(tmp_path: Path) -> None:
    async def writer(db: Database, i: int) -> None:
        async with db.write() as tx:
            user_id = await tx.run("INSERT INTO users (name) VALUES (?)", (f"user{i}",))
            await asyncio.sleep(0)  # yield mid-transaction: another task must not slip in here
            await tx.run(
                "INSERT INTO api_keys (user_id, prefix, secret_hash) VALUES (?, ?, ?)",
                (user_id, f"tsk_p{i:08d}", "h"),
            )

    async def body(db: Database) -> list[Any]:
        outcomes = await asyncio.gather(*(writer(db, i) for i in range(20)), return_exceptions=True)
        assert [o for o in outcomes if o is not None] == []
        async with db.read() as conn:
            return await conn.all(
                "SELECT u.name, k.prefix FROM api_keys k JOIN users u ON u.id = k.user_id ORDER BY u.name"
            )

    rows = with_db(tmp_path / "t.db", MIGRATIONS, body)
    assert len(rows) == 20
    # Each key belongs to the user its own transaction created (no interleaved lastrowid).
    assert all(row["prefix"] == f"tsk_p{int(row['name'][4:]):08d}" for row in rows)


def test_a_failed_write_block_rolls_back_and_the_writer_stays_usable(tmp_path: Path) -> None:
    async def body(db: Database) -> list[Any]:
        with pytest.raises(RuntimeError):
            async with db.write() as tx:
                await tx.run("INSERT INTO users (name) VALUES ('ghost')")
                raise RuntimeError("boom")
        async with db.write() as tx:
            await tx.run("INSERT INTO users (name) VALUES ('real')")
        async with db.read() as conn:
            return [r["name"] for r in await conn.all("SELECT name FROM users")]

    assert with_db(tmp_path / "t.db", MIGRATIONS, body) == ["real"]


def test_a_one_hop_write_batch_commits_after_a_checkpoint_and_rolls_back_on_error(
    tmp_path: Path,
) -> None:
    """``write_batch`` commits in the writer's thread: a statement left stepping by anyone
    (a checkpoint's, an INSERT … RETURNING read once) would make its COMMIT fail."""

    async def body(db: Database) -> list[Any]:
        await db.checkpoint()
        made = await db.write_batch(lambda r: r.one("INSERT INTO users (name) VALUES ('a') RETURNING id")[0])
        assert made >= 1

        def fails(r: SyncReader) -> None:
            r.one("INSERT INTO users (name) VALUES ('ghost') RETURNING id")
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            await db.write_batch(fails)
        await db.write_batch(lambda r: r.one("INSERT INTO users (name) VALUES ('b') RETURNING id"))
        async with db.read() as conn:
            return [r["name"] for r in await conn.all("SELECT name FROM users ORDER BY id")]

    assert with_db(tmp_path / "t.db", MIGRATIONS, body) == ["a", "b"]


def test_readers_are_query_only(tmp_path: Path) -> None:
    async def body(db: Database) -> list[int]:
        flags = []
        for _ in range(2):  # both pooled readers
            async with db.read() as conn:
                flags.append((await conn.one("PRAGMA query_only"))[0])
                with pytest.raises(StorageError):
                    await conn.all("INSERT INTO users (name) VALUES ('sneaky')")
        async with db.read() as conn:
            assert await conn.all("SELECT 1 FROM users WHERE name = 'sneaky'") == []
        return flags

    assert with_db(tmp_path / "t.db", MIGRATIONS, body) == [1, 1]


def test_batch_memo_is_kept_until_another_connection_commits(tmp_path: Path) -> None:
    def memo_token(reader: SyncReader) -> object:
        return reader.memo.setdefault("token", object())

    def memo_keys(reader: SyncReader) -> set[str]:
        return set(reader.memo)

    async def body(db: Database) -> None:
        async with db.read() as conn:
            first = await conn.batch(memo_token)
            assert await conn.batch(memo_token) is first
        async with db.read() as conn:  # the same (only) reader, lent again
            assert await conn.batch(memo_token) is first

        async with db.write() as tx:
            await tx.run("INSERT INTO users (name) VALUES ('someone')")

        async with db.read() as conn:
            assert await conn.batch(memo_keys) == set()
            fresh = await conn.batch(memo_token)
            assert fresh is not first
            rows = await conn.batch(lambda r: r.all("SELECT name FROM users"))
            assert [row["name"] for row in rows] == ["someone"]

    with_db(tmp_path / "t.db", MIGRATIONS, body, readers=1)


def test_batch_memo_is_cleared_by_a_commit_from_another_process_connection(tmp_path: Path) -> None:
    db_path = tmp_path / "t.db"

    async def body(db: Database) -> None:
        async with db.read() as conn:
            await conn.batch(lambda r: r.memo.setdefault("k", 1))
            assert await conn.batch(lambda r: dict(r.memo)) == {"k": 1}
        other = sqlean.connect(str(db_path), isolation_level=None)
        try:
            other.execute("INSERT INTO users (name) VALUES ('outsider')")
        finally:
            other.close()
        async with db.read() as conn:
            assert await conn.batch(lambda r: dict(r.memo)) == {}

    with_db(db_path, MIGRATIONS, body, readers=1)


def test_the_writer_waits_for_another_writers_lock_on_its_thread_and_the_loop_never_waits(
    tmp_path: Path,
) -> None:
    """The writer's own busy_timeout is 0 (the loop shares its connection); ``write()`` and
    ``write_batch`` wait for a foreign write lock in our code, on the writer's thread."""
    import threading
    import time

    path = tmp_path / "t.db"

    async def body(db: Database) -> None:
        other = sqlean.connect(str(path), isolation_level=None, check_same_thread=False)
        try:
            other.execute("BEGIN IMMEDIATE")
            release = threading.Timer(0.3, lambda: other.execute("COMMIT"))
            started = time.monotonic()
            release.start()
            assert db.write_now(lambda r: r.one("SELECT 1")) is None  # declined, not waited
            assert time.monotonic() - started < 0.2
            async with db.write() as tx:  # waits for the other writer, then proceeds
                await tx.run("CREATE TABLE t (x)")
            assert time.monotonic() - started >= 0.25
            release.join(5)
            other.execute("BEGIN IMMEDIATE")
            release = threading.Timer(0.3, lambda: other.execute("COMMIT"))
            started = time.monotonic()
            release.start()
            assert await db.write_batch(lambda r: r.one("INSERT INTO t VALUES (1) RETURNING x")[0]) == 1
            assert time.monotonic() - started >= 0.25
            release.join(5)
        finally:
            other.close()
        writer = db.writer_connection
        assert writer is not None
        assert writer.execute("PRAGMA busy_timeout").fetchone()[0] == 0

    with_db(path, MIGRATIONS, body)
