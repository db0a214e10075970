"""The database under faults: damaged files at start-up (CRASH-04), another process holding
the write lock or a long read (CRASH-05). Real appliance, real SDK client, a real sqlite
process beside it."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import select
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from tests.support.accounts import MeteredUpstream, add_user_keys, admin, credits_path, install, query
from tests.support.clients import connect
from tests.support.servers import ADMIN_KEY, REPO, Appliance, running_appliance, state_files

pytestmark = pytest.mark.e2e
ENV = {"TOOLSPOKE_HEALTH_INTERVAL_S": "0", "TOOLSPOKE_DEMO": "false"}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory that served once and stopped cleanly."""
    data = tmp_path_factory.mktemp("pristine") / "data"
    with running_appliance(data, env=ENV):
        pass
    return data


def _serve(data: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TOOLSPOKE_DATA_DIR": str(data), "TOOLSPOKE_ADMIN_KEY": ADMIN_KEY, **ENV}
    return subprocess.run(
        [sys.executable, "-m", "appliance", "serve", "--port", "0"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
        check=False,
    )


def _zero_header(db: Path) -> None:
    with db.open("r+b") as f:
        f.write(b"\0" * 100)


def _truncate(db: Path) -> None:
    os.truncate(db, db.stat().st_size // 2)


def _scribble_mid_page(db: Path) -> None:
    """Overwrite the middle data page of the largest table: damage that opening the file
    does not notice and an integrity check does. (The file's middle page, as this once
    chose, became a page of the schema when a migration added tables: then the open fails
    first, with another message.)"""
    with closing(sqlite3.connect(f"file:{db}?immutable=1", uri=True)) as conn:
        table = conn.execute(
            "SELECT name FROM dbstat WHERE pagetype = 'leaf' AND name NOT LIKE 'sqlite%'"
            " GROUP BY name ORDER BY count(*) DESC, name LIMIT 1"
        ).fetchone()[0]
        pages = [
            n
            for (n,) in conn.execute(
                "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno", (table,)
            )
        ]
    with db.open("r+b") as f:
        f.seek(4096 * (pages[len(pages) // 2] - 1))  # page numbers count from 1
        f.write(bytes(range(256)) * 16)


def _newer_schema(db: Path) -> None:
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("INSERT INTO schema_migrations (version, name) VALUES (9999, 'future')")


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (_zero_header, "file is not a database"),
        (_truncate, "malformed"),
        (_scribble_mid_page, "damaged"),
        (_newer_schema, "9999"),
    ],
    ids=["zeroed header", "truncated", "a page overwritten mid-file", "newer schema"],
)
def test_a_damaged_database_refuses_to_start_naming_the_file_and_nothing_is_recreated_or_deleted(
    pristine: Path, tmp_path: Path, damage: Callable[[Path], None], says: str
) -> None:
    """CRASH-04: refuse to start naming the file and the error; never a fresh database in its
    place, nothing renamed or removed; a newer schema names both versions."""
    data = tmp_path / "data"
    shutil.copytree(pristine, data)
    db = data / "toolspoke.db"
    damage(db)
    before = state_files(data)
    done = _serve(data)
    assert done.returncode == 2, done.stdout + done.stderr
    assert str(db) in done.stderr and says in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert state_files(data) == before
    if damage is _newer_schema:
        newest = max(int(p.name[:4]) for p in (REPO / "migrations").glob("*.sql"))
        assert "schema version 9999" in done.stderr and f"({newest})" in done.stderr


HOLD = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
conn.execute(sys.argv[2])
if sys.argv[2] == "BEGIN":
    conn.execute("SELECT count(*) FROM audit_log").fetchall()  # the read snapshot starts here
print("held", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


@contextmanager
def _held(db: Path, begin: str) -> Iterator[None]:
    """Another process holding ``BEGIN IMMEDIATE`` (the write lock) or a read transaction."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db), begin], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            ready, _, _ = select.select([proc.stdout], [], [], 30)
            assert ready and proc.stdout.readline().strip() == "held"
            yield
        finally:
            proc.stdin.write("\n")
            proc.stdin.flush()
            assert proc.wait(timeout=30) == 0


HOT_WAL = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode = WAL")  # already so for a live database; a backup is not
conn.execute("PRAGMA wal_autocheckpoint = 0")
conn.execute("CREATE TABLE scratch (note TEXT)")
conn.execute("INSERT INTO scratch VALUES ('committed before the crash')")
os._exit(0)  # no close, no checkpoint: the commit lives only in the -wal
"""


def test_a_hot_wal_left_by_a_killed_writer_is_replayed_not_discarded(pristine: Path, tmp_path: Path) -> None:
    """CRASH-04: the -wal of a crashed writer holds committed rows; start-up keeps them."""
    data = tmp_path / "data"
    shutil.copytree(pristine, data)
    subprocess.run([sys.executable, "-c", HOT_WAL, str(data / "toolspoke.db")], check=True, timeout=30)
    assert (data / "toolspoke.db-wal").stat().st_size > 0
    with running_appliance(data, env=ENV) as app:
        assert admin(app, "GET", "/toolkits").status_code == 200
    assert query(data, "SELECT note FROM scratch") == [("committed before the crash",)]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    data = tmp_path_factory.mktemp("locked") / "data"
    with running_appliance(data, env={**ENV, "TOOLSPOKE_IMPORTS_PER_HOUR": "100"}) as running:
        yield running


@pytest.fixture(scope="module")
def caller(app: Appliance) -> Iterator[tuple[str, MeteredUpstream]]:
    upstream = MeteredUpstream()
    (key,) = add_user_keys(app.data_dir, "lou", 1)
    assert admin(app, "POST", credits_path(app, "lou"), {"amount": 100}).status_code == 201
    install(app, "locked", upstream)
    yield key, upstream
    upstream.close()


async def _session(app: Appliance, key: str, work: Callable[[Any], Any]) -> Any:
    async with connect(dataclasses.replace(app, key=key), mode="legacy") as client:
        return await work(client)


def test_with_another_process_holding_the_write_lock_reads_work_and_a_paid_call_fails_32003_in_budget(
    app: Appliance, caller: tuple[str, MeteredUpstream]
) -> None:
    """CRASH-05: reads keep working (WAL); writes wait out busy_timeout (5 s), then -32003
    well inside the 30 s call budget: no hang, no HTML; afterwards calls work again."""
    key, _ = caller

    async def warm(client: Any) -> Any:
        return await client.call_tool("locked__hit", {})

    assert not asyncio.run(asyncio.wait_for(_session(app, key, warm), 60)).is_error

    async def under_lock(client: Any) -> tuple[Any, float, MCPError]:
        listed = await client.call_tool("list_toolkits", {})
        started = time.monotonic()
        with pytest.raises(MCPError) as refused:
            await client.call_tool("locked__hit", {})
        return listed, time.monotonic() - started, refused.value

    with _held(app.data_dir / "toolspoke.db", "BEGIN IMMEDIATE"):
        listed, took, refused = asyncio.run(asyncio.wait_for(_session(app, key, under_lock), 60))
    assert not listed.is_error and "locked" in listed.content[0].text
    assert refused.code == -32003 and refused.data["reason"] == "storage_unavailable"
    assert 4.0 <= took <= 20.0
    after = asyncio.run(asyncio.wait_for(_session(app, key, warm), 60))
    assert not after.is_error


def test_a_long_read_transaction_in_another_process_does_not_block_paid_calls(
    app: Appliance, caller: tuple[str, MeteredUpstream]
) -> None:
    """CRASH-05 (second run): a long reader never blocks writers in WAL mode."""
    key, _ = caller

    async def three(client: Any) -> list[Any]:
        return [await client.call_tool("locked__hit", {}) for _ in range(3)]

    before = query(app.data_dir, "SELECT count(*) FROM audit_log WHERE toolkit = 'locked'")[0][0]
    with _held(app.data_dir / "toolspoke.db", "BEGIN"):
        results = asyncio.run(asyncio.wait_for(_session(app, key, three), 60))
    assert all(not r.is_error for r in results)
    after = query(app.data_dir, "SELECT count(*) FROM audit_log WHERE toolkit = 'locked'")[0][0]
    assert after - before == 3
