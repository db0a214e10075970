"""SQLite itself, on the thread that holds a connection: connect, check, statements, transactions.

Why sqlean: many Python builds (this machine's included) compile ``sqlite3`` without
loadable-extension support, and PyInstaller bundles whatever the build Python has.
sqlean.py ships its own SQLite with extension loading and FTS5, so the appliance gets the
same SQLite everywhere.

Everything here is synchronous and runs where the connection is used: on its worker thread
(``db/worker.py``), or for ``Database.write_now`` and the memo's look on the event loop
while the writer's thread is idle. ``SyncReader`` and ``SyncWriter`` are the SQLite
implementations of the seam's ``Reader`` and ``Writer`` (``db/seam.py``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import orjson
import sqlean
import sqlite_vec

from appliance.db import generation
from appliance.db.memo import Memo
from appliance.db.worker import Worker
from appliance.errors import ConfigError, StorageError

T = TypeVar("T")
BUSY_TIMEOUT_MS = 5000
CACHE_KIB = 32 * 1024


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def loads(text: str | bytes | None) -> Any:
    return None if text is None else orjson.loads(text)


def connect(path: str, *, writer: bool, synchronous: str = "FULL") -> sqlean.Connection:
    conn = sqlean.connect(path, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlean.Row
    try:
        conn.enable_load_extension(True)
        conn.load_extension(sqlite_vec.loadable_path())
        conn.enable_load_extension(False)
    except (AttributeError, sqlean.OperationalError) as exc:
        raise ConfigError(
            f"this SQLite cannot load the sqlite-vec extension ({exc}); "
            "reinstall toolspoke with its pinned sqlean.py and sqlite-vec"
        ) from None
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    # Search reads the FTS index on every query: its hot pages stay in this bounded cache.
    # No memory map: every page a connection had read through one stayed mapped and counted in
    # the process's resident set (at 100,000 tools 215 MB file-backed, 441 MB RSS in all; 310 MB
    # without it), and search spent no more CPU without it (12.3 against 13.0 ms a search).
    conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
    if writer:
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL: a committed charge or audit row survives power loss, not just a crash.
        # NORMAL (an operator's choice): still survives kill -9, not a power loss.
        conn.execute(f"PRAGMA synchronous = {synchronous}")
    else:
        conn.execute("PRAGMA query_only = ON")
    return conn


def check_capabilities(conn: sqlean.Connection) -> None:
    """Fail at start, with a message a person can act on, if FTS5 or vec0 is missing."""
    options = {row[0] for row in conn.execute("PRAGMA compile_options")}
    if "ENABLE_FTS5" not in options:
        raise ConfigError("this SQLite build has no FTS5; toolspoke's search needs it")
    try:
        conn.execute("SELECT vec_version()").fetchall()
    except sqlean.OperationalError:
        raise ConfigError("sqlite-vec (vec0) is not loaded; toolspoke's vector search needs it") from None


class SyncReader:
    """A connection inside a function run on its own thread (``seam.Reader``).

    ``memo`` is a scratch dict that stays valid until the database changes: it is cleared
    whenever the cache generation moves (``db/memo.py``, ``db/generation.py``), which it
    does after any commit by any connection or process that changed something other than
    the call records. Rooms use it to cache derived figures (e.g. token frequencies, a
    caller's scope).
    """

    def __init__(self, conn: sqlean.Connection, memo: dict[str, Any]):
        self._conn = conn
        self.memo = memo

    def all(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        return list(self._conn.execute(sql, params).fetchall())

    def one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        cursor = self._conn.execute(sql, params)
        try:
            return cursor.fetchone()
        finally:
            # Reset the statement now: one left stepping (an INSERT … RETURNING read once)
            # would make the COMMIT of ``Database.write_batch`` fail with "SQL statements
            # in progress".
            cursor.close()

    def chunks(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = (), size: int = 4096
    ) -> Iterator[list[Any]]:
        """The rows of one statement, ``size`` at a time: a 100,000-tool scan (the vector
        matrix, the backfill's plan) never holds every row as Python objects at once."""
        cursor = self._conn.execute(sql, params)
        try:
            while rows := cursor.fetchmany(size):
                yield list(rows)
        finally:
            cursor.close()


class SyncWriter(SyncReader):
    """A ``SyncReader`` inside the writer's transaction (``seam.Writer``)."""

    def run(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        """Execute one statement; return lastrowid (0 when it inserted nothing)."""
        return run_one(self._conn, sql, params)

    def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self._conn.executemany(sql, rows).close()


class Handle:
    """One connection and what belongs to it: the thread that holds it, its memo."""

    def __init__(self, conn: sqlean.Connection, worker: Worker):
        self.conn = conn
        self.worker = worker
        self.memo = Memo()
        self.counter_sql: str | None = None  # what reads the generation here, found once

    def call(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
        return self.worker.call(fn, *args)


def run_batch(h: Handle, fn: Callable[[SyncReader], T]) -> T:
    """``fn`` over this connection, with the memo of the generation it reads first."""
    return fn(SyncReader(h.conn, _memo(h)))


def run_write(h: Handle, fn: Callable[[SyncWriter], T]) -> T:
    return fn(SyncWriter(h.conn, _memo(h)))


def _memo(h: Handle) -> dict[Any, Any]:
    # One statement on the same connection, in the same hop: the memo is never older than
    # what the function is about to read.
    if h.counter_sql is None:
        h.counter_sql = generation.counter_sql(h.conn)
    return h.memo.at(generation.read(h.conn, h.counter_sql))


def finish(conn: sqlean.Connection, statement: str) -> None:
    """COMMIT or ROLLBACK of a ``Database.write`` block."""
    conn.execute(statement)


def fetch_all(conn: sqlean.Connection, sql: str, params: Sequence[Any] | dict[str, Any]) -> list[Any]:
    return list(conn.execute(sql, params).fetchall())


def run_one(conn: sqlean.Connection, sql: str, params: Sequence[Any] | dict[str, Any]) -> int:
    cursor = conn.execute(sql, params)
    try:
        return cursor.lastrowid or 0
    finally:
        cursor.close()  # see ``SyncReader.one``


def run_many(conn: sqlean.Connection, sql: str, rows: Iterable[Sequence[Any]]) -> None:
    conn.executemany(sql, rows).close()


def is_busy(exc: sqlean.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def begin(conn: sqlean.Connection) -> None:
    """``BEGIN IMMEDIATE`` on the writer's thread, waiting up to BUSY_TIMEOUT_MS while another
    process (the CLI) holds SQLite's write lock.

    The wait is ours, not SQLite's: the writer's own ``busy_timeout`` is 0 once the database
    is open, because the event loop uses that connection too (``write_now``, ``_look``) and
    must never wait on a lock; toggling the timeout around each use cost four statements a
    call. In WAL mode BEGIN IMMEDIATE is where a writer waits: inside the transaction, nothing
    else does.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.001
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlean.OperationalError as exc:
            left = deadline - time.monotonic()
            if not is_busy(exc) or left <= 0:
                raise
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.05)


def run_transaction(h: Handle, fn: Callable[[SyncWriter], T]) -> T:
    begin(h.conn)
    return run_begun(h, fn)


def run_begun(h: Handle, fn: Callable[[SyncWriter], T]) -> T:
    """``fn`` then COMMIT in a transaction already begun; ROLLBACK if anything fails."""
    conn = h.conn
    try:
        result = run_write(h, fn)
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(Exception):
            conn.execute("ROLLBACK")
        raise
    return result


# SQLite's primary result codes that say the disk, not the statement, failed a write:
# READONLY, IOERR, CORRUPT, FULL, CANTOPEN. A held lock (BUSY, LOCKED) is not one of them.
DISK_FAILURES = frozenset({8, 10, 11, 13, 14})


def disk_failure(exc: BaseException | None) -> str | None:
    if isinstance(exc, StorageError):
        exc = exc.__cause__
    if not isinstance(exc, sqlean.Error):
        return None
    code = getattr(exc, "sqlite_errorcode", None)
    if not isinstance(code, int) or code & 0xFF not in DISK_FAILURES:
        return None
    return str(exc)


def probe(conn: sqlean.Connection) -> None:
    """A real one-page write: the database header's user_version, written back unchanged."""
    begin(conn)
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        conn.execute(f"PRAGMA user_version = {int(version)}")
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(Exception):
            conn.execute("ROLLBACK")
        raise
