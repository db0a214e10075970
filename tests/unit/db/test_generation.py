"""The cache generation: remembered lookups survive call records, not anything else.

A real database on disk. Writers are this process's ``Database`` and, as "another process",
a separate process writing with the standard library's ``sqlite3`` (as a CLI or a shell would).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from appliance.db import Database, generation
from appliance.db.connection import _connect
from appliance.db.migrate import default_migrations_dir
from appliance.ledger import store
from appliance.ledger.store import AuditRow


def with_db(path: Path, body: Callable[[Database], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        db = Database(path)
        await db.open(default_migrations_dir())
        try:
            async with asyncio.timeout(20):
                return await body(db)
        finally:
            await db.close()

    return asyncio.run(main())


def audit_row() -> AuditRow:
    return AuditRow(time.time(), None, "u", None, None, "tsk_x", None, "kit", "default",
                    "kit__a", None, "ok", None, 1.0, 10, 0, False)  # fmt: skip


def test_a_call_record_leaves_remembered_lookups_alone_and_a_key_change_clears_them(tmp_path: Path) -> None:
    async def body(db: Database) -> None:
        db.memo()["k"] = "remembered"
        async with db.write() as tx:
            await tx.batch(lambda r: store.insert_call(r, audit_row(), None))
        assert db.memo().get("k") == "remembered"  # an audit row changes no lookup
        async with db.write() as tx:
            await tx.run("INSERT INTO users (name) VALUES ('someone')")
        assert "k" not in db.memo()

    with_db(tmp_path / "t.db", body)


async def next_turn() -> None:
    """Let the event loop turn: the memo is looked up at most once per turn, and a request
    always arrives on a later turn than the commit it must see."""
    await asyncio.sleep(0)


def elsewhere(path: Path, sql: str) -> None:
    """``sql`` committed by another process: a second SQLite library in this process would
    share its POSIX locks and, closing, could checkpoint under the first one's feet."""
    script = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute(sys.argv[2]); c.commit(); c.close()"
    )
    subprocess.run([sys.executable, "-c", script, str(path), sql], check=True, timeout=30)


def test_a_change_made_by_another_process_clears_the_memo_on_the_next_look(tmp_path: Path) -> None:
    path = tmp_path / "t.db"

    async def body(db: Database) -> None:
        db.memo()["k"] = "remembered"
        elsewhere(path, "INSERT INTO audit_log (at, tool, outcome, duration_ms) VALUES (1, 't', 'ok', 1)")
        await next_turn()
        assert db.memo().get("k") == "remembered"
        elsewhere(path, "INSERT INTO users (name) VALUES ('from-the-cli')")
        await next_turn()
        assert "k" not in db.memo()
        db.memo()["k"] = "again"
        elsewhere(path, "DELETE FROM users WHERE name = 'from-the-cli'")
        await next_turn()
        assert "k" not in db.memo()

    with_db(path, body)


def test_every_ordinary_table_but_the_call_records_bumps_the_generation_on_each_kind_of_write(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    with_db(path, lambda db: asyncio.sleep(0))
    # The appliance's own SQLite, with vec0 loaded: it tells virtual tables' shadow tables apart.
    with closing(_connect(str(path), writer=False)) as conn:
        exempt = {r[0] for r in conn.execute("SELECT name FROM cache_exempt")}
        tables = {
            r[1]
            for r in conn.execute("PRAGMA table_list")
            if r[2] == "table" and not r[1].startswith("sqlite_")
        }
        triggers = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert {"audit_log", "ledger_entries"} <= exempt
    covered = tables - exempt
    assert {"users", "api_keys", "tools", "toolkits", "grants", "secrets"} <= covered
    missing = [
        f"{t}:{op}" for t in covered for op in ("ins", "upd", "del") if f"cache_bump_{t}_{op}" not in triggers
    ]
    assert missing == []
    assert not any(name.startswith(f"cache_bump_{t}_") for t in exempt for name in triggers)


def test_triggers_are_installed_once_and_reopening_adds_none(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with_db(path, lambda db: asyncio.sleep(0))
    with closing(_connect(str(path), writer=True)) as conn:
        assert generation.install_triggers(conn) == 0
        before = generation.read(conn)
        conn.execute("INSERT INTO projects (slug) VALUES ('p2')")  # autocommit
        assert generation.read(conn) == before + 1


def test_one_look_serves_a_request_from_one_look_and_a_task_it_starts_looks_itself(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"

    async def body(db: Database) -> None:
        db.memo()["k"] = "remembered"
        with db.one_look():
            elsewhere(path, "INSERT INTO users (name) VALUES ('mid-request')")
            await next_turn()
            assert db.memo().get("k") == "remembered"  # the request keeps what it looked up

            async def background() -> dict[Any, Any]:
                return db.memo()

            assert "k" not in await asyncio.create_task(background())  # not the request's
        await next_turn()
        assert "k" not in db.memo()  # the next request sees the change

    with_db(path, body)


def test_the_look_reads_the_idle_writer_and_the_probe_while_the_writer_is_busy(tmp_path: Path) -> None:
    """Idle, the writer's connection is read (its page cache survives its own commits); busy
    (its lock held), the probe is, which never sees the writer's uncommitted rows."""
    path = tmp_path / "t.db"

    async def body(db: Database) -> None:
        writer_conn = db.writer_connection
        assert writer_conn is not None
        seen: list[Any] = []
        original = generation.read

        def spying(conn: Any, sql: str = generation.COUNTER_SQL) -> int:
            seen.append(conn)
            return original(conn, sql)

        generation.read = spying  # type: ignore[assignment]
        try:
            db.memo()["k"] = "remembered"
            await next_turn()
            assert db.memo().get("k") == "remembered"
            assert seen[-1] is writer_conn
            async with db.write() as tx:
                await tx.run("INSERT INTO users (name) VALUES ('not-yet-committed')")
                await next_turn()
                assert db.memo().get("k") == "remembered"  # uncommitted: no change yet
                assert seen[-1] is not writer_conn
            await next_turn()
            assert "k" not in db.memo()  # committed: the next look sees it
            elsewhere(path, "UPDATE users SET name = 'renamed' WHERE name = 'not-yet-committed'")
            db.memo()["k"] = "again"
            await next_turn()
            assert "k" not in db.memo()  # another process's commit, through the idle writer
            assert seen[-1] is writer_conn
        finally:
            generation.read = original  # type: ignore[assignment]

    with_db(path, body)
