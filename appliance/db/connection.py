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
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite
import orjson
import sqlean
import sqlite_vec

from appliance.db import generation
from appliance.db.space import Storage
from appliance.errors import ConfigError, StorageError

log = logging.getLogger(__name__)
# aiosqlite logs every call it hands its thread at DEBUG, statement and parameters included
# ("executing functools.partial(<execute>, 'INSERT INTO secrets ...', (..., b'<sealed blob>'))"):
# at TOOLSPOKE_LOG_LEVEL=DEBUG that put sealed credentials, key hashes and every audit row in
# the log. Its DEBUG records stop here whatever the root level; above DEBUG it logs no SQL.
logging.getLogger("aiosqlite").setLevel(logging.INFO)

T = TypeVar("T")
BUSY_TIMEOUT_MS = 5000
# A commit on the event loop (``Database.write_now``) slower than this turns the loop path off
# for INLINE_PAUSE_S: the disk is slow or stalling, and the loop must not wait on it.
INLINE_SLOW_S = 0.005
INLINE_PAUSE_S = 10.0
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
        conn.execute("SELECT vec_version()").fetchall()
    except sqlean.OperationalError:
        raise ConfigError("sqlite-vec (vec0) is not loaded; toolspoke's vector search needs it") from None


class SyncReader:
    """The same connection, used synchronously inside its own thread (see ``ReadConn.batch``).

    ``memo`` is a scratch dict that stays valid until the database changes: it is cleared
    whenever the cache generation moves (``db/generation.py``), which it does after any
    commit by any connection or process that changed something other than the call records.
    Rooms use it to cache derived figures (e.g. token frequencies, a caller's scope).
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


_MEMOS: dict[int, tuple[int, dict[str, Any]]] = {}
# (database, memo, task) for ``Database.one_look``.
_PINNED: contextvars.ContextVar[tuple[Database, dict[Hashable, Any], asyncio.Task[Any] | None] | None] = (
    contextvars.ContextVar("toolspoke_pinned_memo", default=None)
)
_COUNTER_SQL: dict[int, str] = {}


def _run_batch(conn: sqlean.Connection, fn: Callable[[SyncReader], T]) -> T:
    sql = _COUNTER_SQL.get(id(conn))
    if sql is None:
        sql = _COUNTER_SQL[id(conn)] = generation.counter_sql(conn)
    version = generation.read(conn, sql)
    seen = _MEMOS.get(id(conn))
    if seen is None or seen[0] != version:
        seen = (version, {})
        _MEMOS[id(conn)] = seen
    return fn(SyncReader(conn, seen[1]))


def _is_busy(exc: sqlean.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def _begin(conn: sqlean.Connection) -> None:
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
            if not _is_busy(exc) or left <= 0:
                raise
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.05)


def _run_transaction(conn: sqlean.Connection, fn: Callable[[SyncReader], T]) -> T:
    _begin(conn)
    return _run_begun(conn, fn)


def _run_begun(conn: sqlean.Connection, fn: Callable[[SyncReader], T]) -> T:
    """``fn`` then COMMIT in a transaction already begun; ROLLBACK if anything fails."""
    try:
        result = _run_batch(conn, fn)
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(Exception):
            conn.execute("ROLLBACK")
        raise
    return result


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


# SQLite's primary result codes that say the disk, not the statement, failed a write:
# READONLY, IOERR, CORRUPT, FULL, CANTOPEN. A held lock (BUSY, LOCKED) is not one of them.
_DISK_FAILURES = frozenset({8, 10, 11, 13, 14})


def _disk_failure(exc: BaseException | None) -> str | None:
    if isinstance(exc, StorageError):
        exc = exc.__cause__
    if not isinstance(exc, sqlean.Error):
        return None
    code = getattr(exc, "sqlite_errorcode", None)
    if not isinstance(code, int) or code & 0xFF not in _DISK_FAILURES:
        return None
    return str(exc)


def _probe(conn: sqlean.Connection) -> None:
    """A real one-page write: the database header's user_version, written back unchanged."""
    _begin(conn)
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        conn.execute(f"PRAGMA user_version = {int(version)}")
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(Exception):
            conn.execute("ROLLBACK")
        raise


class Database:
    """The appliance's SQLite database: ``async with db.write() as tx`` / ``db.read()``."""

    def __init__(self, path: Path, *, synchronous: str = "FULL", min_free_bytes: int = 0):
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
        self.path = path
        self.synchronous = synchronous
        # Whether a call's accounting can be written now (db/space.py): asked before dispatch.
        self.storage = Storage(path.parent, floor_bytes=min_free_bytes)
        self._writer: aiosqlite.Connection | None = None
        self._readers: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
        self._all: list[aiosqlite.Connection] = []
        self._write_lock = asyncio.Lock()
        self._probe: sqlean.Connection | None = None
        self._memo: tuple[int | None, dict[Hashable, Any]] = (None, {})
        self._counter_sql = generation.COUNTER_SQL
        self._checked = False
        # Counts this process's commits, so a cache of derived figures (the ledger's) can tell
        # that another writer changed the database without asking it.
        self.generation = 0
        self._inline_paused_until = 0.0
        self.inline_commits = 0  # how many commits ran on the loop (shown by the benches)

    async def open(self, migrations_dir: Path, readers: int = READERS) -> None:
        from appliance.db.migrate import apply_migrations

        self.path.parent.mkdir(parents=True, exist_ok=True)
        path = str(self.path)
        try:
            self._writer = await self._open_one(path, writer=True)
            await self._writer._execute(check_capabilities, self._writer._conn)
            await self._writer._execute(apply_migrations, self._writer._conn, migrations_dir)
            await self._writer._execute(generation.install_triggers, self._writer._conn)
            # From here on the writer never waits inside SQLite (see ``_begin``).
            await self._writer._execute(self._writer._conn.execute, "PRAGMA busy_timeout = 0")
            for _ in range(readers):
                self._readers.put_nowait(await self._open_one(path, writer=False))
            self._probe = _connect(path, writer=False)
            self._probe.execute("PRAGMA busy_timeout = 0")  # it runs on the event loop
            self._probe.row_factory = None  # plain tuples: a third cheaper per look
            self._counter_sql = generation.counter_sql(self._probe)
        except sqlean.DatabaseError as exc:
            await self.close()
            raise ConfigError(f"cannot open database {path}: {exc}") from None
        except ConfigError as exc:  # a newer schema, a bad migration: name the file too
            await self.close()
            if path in exc.public_message:
                raise
            raise ConfigError(f"database {path}: {exc.public_message}", field=exc.field) from None
        except BaseException:
            await self.close()
            raise

    async def _open_one(self, path: str, *, writer: bool) -> aiosqlite.Connection:
        conn = aiosqlite.Connection(lambda: _connect(path, writer=writer, synchronous=self.synchronous), 64)
        self._all.append(conn)
        try:
            return await conn
        except BaseException:
            # A failed connect (a corrupt file): aiosqlite stops its worker thread, which then
            # answers on this loop; let it finish while the loop still runs, or it prints
            # "Event loop is closed" tracebacks at exit.
            await asyncio.to_thread(conn._thread.join, 5)
            raise

    async def close(self) -> None:
        probe, self._probe = self._probe, None
        if probe is not None:
            probe.close()
        self._memo = (None, {})
        self._checked = False
        conns, self._all = self._all, []
        for conn in conns:
            if conn._connection is not None:
                _MEMOS.pop(id(conn._connection), None)
                _COUNTER_SQL.pop(id(conn._connection), None)
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
                # Closed at once: a statement left stepping blocks the next COMMIT.
                async with self._writer.execute("PRAGMA wal_checkpoint(PASSIVE)") as cursor:
                    await cursor.fetchall()
            except sqlean.OperationalError as exc:
                log.warning("checkpoint skipped: %s", exc)

    @contextlib.contextmanager
    def one_look(self) -> Iterator[None]:
        """Within this block, this task's ``memo()`` is the one looked up on entering it.

        A request asks for the memo four or five times (key, tool, credential, connection);
        one look at the generation per request is enough: a change committed before the
        request arrived is seen by it, as before. Tasks started inside the block look
        for themselves (a long-lived task must never keep a request's memo).
        """
        token = _PINNED.set(None)
        try:
            memo = self.memo()
            _PINNED.set((self, memo, asyncio.current_task()))
            yield
        finally:
            _PINNED.reset(token)

    async def quick_check(self) -> list[str]:
        """SQLite's ``PRAGMA quick_check`` (every page read): ``["ok"]`` or what is damaged."""
        async with self.read() as conn:
            try:
                rows = await conn._conn.execute_fetchall("PRAGMA quick_check(5)")
            except sqlean.DatabaseError as exc:
                return [str(exc)]
        return [str(r[0]) for r in rows]

    def memo(self) -> dict[Hashable, Any]:
        """A scratch dict for this process that stays valid until the database changes.

        Cleared whenever the cache generation moves (``db/generation.py``), which it does
        after any commit that changed more than the call records, by any connection or
        process (the writer here, the CLI beside a serving appliance); audit rows and
        charges, committed after every call, leave it alone.
        The look runs on the event loop itself (a few µs, no thread hop), which is what
        lets a call authenticate and resolve its tool without a hop to a reader when
        nothing changed. A value read after ``memo()`` was taken is safe to store in it:
        if the database moved meanwhile, the next ``memo()`` hands out a fresh dict.
        """
        pinned = _PINNED.get()
        if pinned is not None and pinned[0] is self and pinned[2] is asyncio.current_task():
            return pinned[1]
        if self._checked:
            return self._memo[1]
        version: int | None = None
        try:
            version = self._look()
        except sqlean.Error as exc:
            log.warning("cache generation probe failed, memo skipped: %s", exc)
        if version is None:
            return {}  # unknown: nothing remembered is trusted
        if self._memo[0] != version:
            self._memo = (version, {})
        # One look per turn of the event loop (a request asks four or five times, ~12 µs a
        # look): nothing this process commits can land before the next turn, and another
        # process's commit could as well have landed just after the look.
        try:
            asyncio.get_running_loop().call_soon(self._unchecked)
            self._checked = True
        except RuntimeError:
            pass  # no loop running (a synchronous caller): look every time
        return self._memo[1]

    def _unchecked(self) -> None:
        self._checked = False

    def _look(self) -> int | None:
        """The cache generation, read on the writer's connection when it is idle, else on
        the probe's.

        Why the writer first: a connection drops its page cache whenever another connection
        has committed, and the writer commits every call's audit row, so on the probe each
        look re-read its pages (55 µs a look against 15 µs, profiled with one client
        calling). The writer's own commits leave its cache warm; another process's commit
        is seen by it the same way (WAL), so what it reads is the same counter. Idle means
        its lock is free: every use of the writer holds that lock, so its thread is not
        using the connection now. Its ``busy_timeout`` is 0 (``_begin``), as the probe's:
        the loop never waits on a lock.
        """
        writer = self._writer
        if writer is not None and not self._write_lock.locked() and writer._connection is not None:
            return generation.read(writer._conn, self._counter_sql)
        if self._probe is not None:
            return generation.read(self._probe, self._counter_sql)
        return None

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

    async def write_batch(self, fn: Callable[[SyncReader], T]) -> T:
        """``fn`` inside ``BEGIN IMMEDIATE`` … ``COMMIT`` on the writer, in one thread hop.

        ``write()`` costs a hop for BEGIN, one per statement and one for COMMIT; the ledger's
        group commit runs after every call, so it writes its batch this way. ``fn`` runs in
        the writer's thread and must not touch the event loop; if it raises, nothing of it
        is committed.
        """
        assert self._writer is not None, "database is not open"
        async with self._write_lock:
            conn = self._writer
            try:
                result = await conn._execute(_run_transaction, conn._conn, fn)
            except sqlean.OperationalError as exc:
                self._write_failed(exc)
                raise _storage_error(exc) from exc
            self.generation += 1
            return result

    def _write_failed(self, exc: BaseException) -> None:
        reason = _disk_failure(exc)
        if reason is not None:
            self.storage.failed(reason)

    async def probe_write(self) -> bool:
        """A real write (one page through the WAL), to learn whether the disk takes writes
        again after one failed; clears ``storage.failing`` when it does."""
        assert self._writer is not None, "database is not open"
        async with self._write_lock:
            conn = self._writer
            try:
                await conn._execute(_probe, conn._conn)
            except sqlean.Error as exc:
                if _disk_failure(exc) is not None:
                    self.storage.failed(str(exc))
                return False
        self.storage.recovered()
        return True

    def write_now(self, fn: Callable[[SyncReader], T]) -> tuple[T] | None:
        """``fn`` in ``BEGIN IMMEDIATE`` … ``COMMIT`` on the writer, here on the event loop.

        For a lone small commit, where the writer thread's hop there and back costs more
        than the commit. Returns ``(result,)``, or None without doing anything when it
        cannot run now: the writer is busy in this process (its lock is held, so its
        thread is idle whenever we get past that check), another process holds SQLite's
        write lock (no busy wait on the loop: the writer's ``busy_timeout`` is 0), or a
        recent commit here took over INLINE_SLOW_S. ``fn`` must be quick and must not touch
        the event loop; if it raises, nothing of it is committed.
        """
        writer = self._writer
        if writer is None or self._write_lock.locked():
            return None
        loop = asyncio.get_running_loop()
        started = loop.time()
        if started < self._inline_paused_until:
            return None
        conn: sqlean.Connection = writer._conn
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")  # busy_timeout is 0: no wait here
            except sqlean.OperationalError as exc:
                if _is_busy(exc):
                    return None  # another process is writing: wait for it on the thread
                raise
            result = _run_begun(conn, fn)
        except sqlean.OperationalError as exc:
            self._write_failed(exc)
            raise _storage_error(exc) from exc
        finally:
            if loop.time() - started > INLINE_SLOW_S:
                self._inline_paused_until = loop.time() + INLINE_PAUSE_S
                log.info("a commit on the event loop was slow; committing on the writer thread for a while")
        self.generation += 1
        self.inline_commits += 1
        return (result,)

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[WriteTx]:
        assert self._writer is not None, "database is not open"
        async with self._write_lock:
            conn = self._writer
            try:
                await conn._execute(_begin, conn._conn)
            except sqlean.OperationalError as exc:
                raise _storage_error(exc) from exc
            try:
                yield WriteTx(conn)
            except BaseException as exc:
                self._write_failed(exc)
                with contextlib.suppress(Exception):
                    await conn.execute("ROLLBACK")
                raise
            try:
                await conn.execute("COMMIT")
            except sqlean.OperationalError as exc:
                self._write_failed(exc)
                with contextlib.suppress(Exception):
                    await conn.execute("ROLLBACK")
                raise _storage_error(exc) from exc
            self.generation += 1
