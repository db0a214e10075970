"""SQLite connections: one writer, a few readers, sqlite-vec loaded, FTS5 checked.

Why sqlean: many Python builds (this machine's included) compile ``sqlite3`` without
loadable-extension support, and PyInstaller bundles whatever the build Python has.
sqlean.py ships its own SQLite with extension loading and FTS5, so the appliance gets the
same SQLite everywhere. aiosqlite takes it through its ``connector`` argument.

Why one writer: SQLite allows one writer at a time anyway; funnelling every write through
one connection behind an asyncio lock, in ``BEGIN IMMEDIATE``, means a transaction never
interleaves with another task's (a shared aiosqlite connection otherwise mixes them) and
never fails with SQLITE_BUSY half-way. Readers run concurrently in WAL mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite
import orjson
import sqlean
import sqlite_vec

from appliance.errors import ConfigError, StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")
BUSY_TIMEOUT_MS = 5000
CACHE_KIB = 32 * 1024
MMAP_BYTES = 512 * 1024 * 1024
READERS = 2


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def loads(text: str | bytes | None) -> Any:
    return None if text is None else orjson.loads(text)


def _connect(path: str, *, writer: bool, synchronous: str = "FULL") -> sqlean.Connection:
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
    # Search reads the FTS index on every query: keep its pages in memory (a 100k-tool
    # catalogue is ~130 MB) instead of copying them through read() each time.
    conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
    conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
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
        conn.execute("SELECT vec_version()").fetchone()
    except sqlean.OperationalError:
        raise ConfigError("sqlite-vec (vec0) is not loaded; toolspoke's vector search needs it") from None


class SyncReader:
    """The same connection, used synchronously inside its own thread (see ``ReadConn.batch``).

    ``memo`` is a scratch dict that stays valid until the database changes: it is cleared
    whenever ``PRAGMA data_version`` moves, which it does after any commit by any other
    connection or process. Rooms use it to cache derived figures (e.g. token frequencies).
    """

    def __init__(self, conn: sqlean.Connection, memo: dict[str, Any]):
        self._conn = conn
        self.memo = memo

    def all(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        return list(self._conn.execute(sql, params).fetchall())

    def one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        return self._conn.execute(sql, params).fetchone()


_MEMOS: dict[int, tuple[int, dict[str, Any]]] = {}


def _run_batch(conn: sqlean.Connection, fn: Callable[[SyncReader], T]) -> T:
    version = conn.execute("PRAGMA data_version").fetchone()[0]
    seen = _MEMOS.get(id(conn))
    if seen is None or seen[0] != version:
        seen = (version, {})
        _MEMOS[id(conn)] = seen
    return fn(SyncReader(conn, seen[1]))


class ReadConn:
    """A read-only connection lent to one task."""

    def __init__(self, conn: aiosqlite.Connection):
        self._conn = conn

    async def batch(self, fn: Callable[[SyncReader], T]) -> T:
        """Run ``fn`` in the connection's thread: several statements for one thread hop.

        Each ``await`` on aiosqlite costs a hop to its thread and back (~0.2 ms here); the
        search path runs three statements per query, so it batches them.
        """
        try:
            return await self._conn._execute(_run_batch, self._conn._conn, fn)
        except sqlean.OperationalError as exc:
            raise _storage_error(exc) from exc

    async def all(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        try:
            async with self._conn.execute(sql, params) as cur:
                return list(await cur.fetchall())
        except sqlean.OperationalError as exc:
            raise _storage_error(exc) from exc

    async def one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        rows = await self.all(sql, params)
        return rows[0] if rows else None


class WriteTx(ReadConn):
    """The writer connection inside ``BEGIN IMMEDIATE``; commits when the block ends."""

    async def run(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        """Execute one statement; return lastrowid."""
        try:
            async with self._conn.execute(sql, params) as cur:
                return cur.lastrowid or 0
        except sqlean.OperationalError as exc:
            raise _storage_error(exc) from exc

    async def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        try:
            await self._conn.executemany(sql, rows)
        except sqlean.OperationalError as exc:
            raise _storage_error(exc) from exc


def _storage_error(exc: Exception) -> StorageError:
    log.error("storage error: %s", exc)
    return StorageError("storage unavailable; try again shortly")


class Database:
    """The appliance's SQLite database: ``async with db.write() as tx`` / ``db.read()``."""

    def __init__(self, path: Path, *, synchronous: str = "FULL"):
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
        self.path = path
        self.synchronous = synchronous
        self._writer: aiosqlite.Connection | None = None
        self._readers: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
        self._all: list[aiosqlite.Connection] = []
        self._write_lock = asyncio.Lock()
        self._probe: sqlean.Connection | None = None
        self._memo: tuple[int | None, dict[Hashable, Any]] = (None, {})
        # Counts this process's commits, so a cache of derived figures (the ledger's) can tell
        # that another writer changed the database without asking it.
        self.generation = 0

    async def open(self, migrations_dir: Path, readers: int = READERS) -> None:
        from appliance.db.migrate import apply_migrations

        self.path.parent.mkdir(parents=True, exist_ok=True)
        path = str(self.path)
        try:
            self._writer = await self._open_one(path, writer=True)
            await self._writer._execute(check_capabilities, self._writer._conn)
            await self._writer._execute(apply_migrations, self._writer._conn, migrations_dir)
            for _ in range(readers):
                self._readers.put_nowait(await self._open_one(path, writer=False))
            self._probe = _connect(path, writer=False)
            self._probe.execute("PRAGMA busy_timeout = 0")  # it runs on the event loop
        except sqlean.DatabaseError as exc:
            await self.close()
            raise ConfigError(f"cannot open database {path}: {exc}") from None
        except BaseException:
            await self.close()
            raise

    async def _open_one(self, path: str, *, writer: bool) -> aiosqlite.Connection:
        conn = aiosqlite.Connection(lambda: _connect(path, writer=writer, synchronous=self.synchronous), 64)
        self._all.append(conn)
        return await conn

    async def close(self) -> None:
        probe, self._probe = self._probe, None
        if probe is not None:
            probe.close()
        self._memo = (None, {})
        conns, self._all = self._all, []
        for conn in conns:
            if conn._connection is not None:
                _MEMOS.pop(id(conn._connection), None)
            with contextlib.suppress(Exception):
                await conn.close()
        self._writer = None

    async def checkpoint(self) -> None:
        """Fold the WAL back into the database file after a large write.

        Readers look pages up through the WAL index while it holds them; after an import of
        thousands of tools that made every search measurably slower until SQLite's own
        checkpoint caught up.
        """
        assert self._writer is not None, "database is not open"
        async with self._write_lock:
            try:
                await self._writer.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlean.OperationalError as exc:
                log.warning("checkpoint skipped: %s", exc)

    def memo(self) -> dict[Hashable, Any]:
        """A scratch dict for this process that stays valid until the database changes.

        Cleared whenever ``PRAGMA data_version`` moves, which it does after any commit by
        any connection or process (the writer here, the CLI beside a serving appliance).
        The probe runs on the event loop itself (a few µs, no thread hop), which is what
        lets a call authenticate and resolve its tool without a hop to a reader when
        nothing changed. A value read after ``memo()`` was taken is safe to store in it:
        if the database moved meanwhile, the next ``memo()`` hands out a fresh dict.
        """
        version: int | None = None
        if self._probe is not None:
            try:
                version = int(self._probe.execute("PRAGMA data_version").fetchone()[0])
            except sqlean.Error as exc:
                log.warning("data_version probe failed, memo skipped: %s", exc)
        if version is None:
            return {}  # unknown: nothing remembered is trusted
        if self._memo[0] != version:
            self._memo = (version, {})
        return self._memo[1]

    async def cached(self, key: Hashable, load: Callable[[ReadConn], Awaitable[T]]) -> T:
        """``load`` on a reader, remembered under ``key`` until the database changes."""
        memo = self.memo()
        if key in memo:
            return cast(T, memo[key])
        async with self.read() as conn:
            value = await load(conn)
        memo[key] = value
        return value

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[ReadConn]:
        conn = await self._readers.get()
        try:
            yield ReadConn(conn)
        finally:
            self._readers.put_nowait(conn)

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[WriteTx]:
        assert self._writer is not None, "database is not open"
        async with self._write_lock:
            conn = self._writer
            try:
                await conn.execute("BEGIN IMMEDIATE")
            except sqlean.OperationalError as exc:
                raise _storage_error(exc) from exc
            try:
                yield WriteTx(conn)
            except BaseException:
                with contextlib.suppress(Exception):
                    await conn.execute("ROLLBACK")
                raise
            try:
                await conn.execute("COMMIT")
            except sqlean.OperationalError as exc:
                with contextlib.suppress(Exception):
                    await conn.execute("ROLLBACK")
                raise _storage_error(exc) from exc
            self.generation += 1
