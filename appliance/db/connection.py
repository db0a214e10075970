"""SQLite connections for the event loop: one writer, a few readers, each on its own thread.

Why our own thread per connection (``db/worker.py``): every use of a connection, a single
statement or a whole function of several (``Database.reading``, ``writing``), is one hop to
the thread that holds it, in order. aiosqlite, which the design started from, has no public
way to run a function on its thread, and its statement calls cost a hop each for execute,
fetch and close; the measurements are in ``db/worker.py``.

Why one writer: SQLite allows one writer at a time anyway; funnelling every write through
one connection behind an asyncio lock, in ``BEGIN IMMEDIATE``, means a transaction never
interleaves with another task's (a shared connection otherwise mixes them) and never fails
with SQLITE_BUSY half-way. Readers run concurrently in WAL mode.

What runs on a connection's thread is in ``db/sqlite.py``; the memo in ``db/memo.py``; the
protocols a second engine would implement in ``db/seam.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import sqlean

from appliance.db import generation
from appliance.db.memo import LoopMemo
from appliance.db.space import Storage
from appliance.db.sqlite import (
    Handle,
    SyncReader,
    SyncWriter,
    begin,
    check_capabilities,
    connect,
    disk_failure,
    dumps,
    fetch_all,
    finish,
    is_busy,
    loads,
    probe,
    run_batch,
    run_begun,
    run_many,
    run_one,
    run_transaction,
)
from appliance.db.worker import Worker
from appliance.errors import ConfigError, StorageError

if TYPE_CHECKING:
    from appliance.db.seam import AsyncReader, AsyncWriter, Reader, Store, Writer

__all__ = [
    "Database",
    "ReadConn",
    "SyncReader",
    "SyncWriter",
    "WriteTx",
    "check_capabilities",
    "dumps",
    "loads",
]

log = logging.getLogger(__name__)
_connect = connect  # the name the tests and the crash helpers know

T = TypeVar("T")
# A commit on the event loop (``Database.write_now``) slower than this turns the loop path off
# for INLINE_PAUSE_S: the disk is slow or stalling, and the loop must not wait on it.
INLINE_SLOW_S = 0.005
INLINE_PAUSE_S = 10.0
READERS = 2


class ReadConn:
    """A read-only connection lent to one task (``seam.AsyncReader``): one hop a call."""

    def __init__(self, handle: Handle):
        self._h = handle

    async def batch(self, fn: Callable[[SyncReader], T]) -> T:
        """Run ``fn`` in the connection's thread: several statements for one thread hop.

        Each call here costs a hop to that thread and back (~0.05 ms of CPU, more wall
        time under load); the search path runs three statements per query, so it batches
        them.
        """
        try:
            return await self._h.call(run_batch, self._h, fn)
        except sqlean.OperationalError as exc:
            raise _storage_error(exc) from exc

    async def all(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        try:
            return await self._h.call(fetch_all, self._h.conn, sql, params)
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
            return await self._h.call(run_one, self._h.conn, sql, params)
        except sqlean.OperationalError as exc:
            raise _storage_error(exc) from exc

    async def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        try:
            await self._h.call(run_many, self._h.conn, sql, rows)
        except sqlean.OperationalError as exc:
            raise _storage_error(exc) from exc


def _storage_error(exc: Exception) -> StorageError:
    log.error("storage error: %s", exc)
    return StorageError("storage unavailable; try again shortly")


class Database:
    """The appliance's SQLite database (``seam.Store``).

    ``await db.reading(fn)`` / ``db.writing(fn)``: a function over a reader or the writer, in
    one hop; ``async with db.read() as conn`` / ``db.write() as tx``: statement by statement.
    """

    def __init__(self, path: Path, *, synchronous: str = "FULL", min_free_bytes: int = 0):
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
        self.path = path
        self.synchronous = synchronous
        # Whether a call's accounting can be written now (db/space.py): asked before dispatch.
        self.storage = Storage(path.parent, floor_bytes=min_free_bytes)
        self._writer: Handle | None = None
        self._readers: asyncio.Queue[Handle] = asyncio.Queue()
        self._all: list[Handle] = []
        self._write_lock = asyncio.Lock()
        self._probe: sqlean.Connection | None = None
        self._loop_memo = LoopMemo(self._look, sqlean.Error)
        self._counter_sql = generation.COUNTER_SQL
        # Counts this process's commits, so a cache of derived figures (the ledger's) can tell
        # that another writer changed the database without asking it.
        self.generation = 0
        self._inline_paused_until = 0.0
        self.inline_commits = 0  # how many commits ran on the loop (shown by the benches)

    @property
    def hops(self) -> int:
        """Thread hops so far, every connection's together (what the seam's tests count)."""
        return sum(h.worker.hops for h in self._all)

    @property
    def writer_connection(self) -> sqlean.Connection | None:
        """The writer's SQLite connection itself, for tests that watch what reads it."""
        return None if self._writer is None else self._writer.conn

    async def open(self, migrations_dir: Path, readers: int = READERS) -> None:
        from appliance.db.migrate import apply_migrations

        self.path.parent.mkdir(parents=True, exist_ok=True)
        path = str(self.path)
        try:
            writer = self._writer = await self._open_one(path, writer=True)
            await writer.call(check_capabilities, writer.conn)
            await writer.call(apply_migrations, writer.conn, migrations_dir)
            await writer.call(generation.install_triggers, writer.conn)
            # From here on the writer never waits inside SQLite (see ``sqlite.begin``).
            await writer.call(finish, writer.conn, "PRAGMA busy_timeout = 0")
            for _ in range(readers):
                self._readers.put_nowait(await self._open_one(path, writer=False))
            self._probe = connect(path, writer=False)
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

    async def _open_one(self, path: str, *, writer: bool) -> Handle:
        """A connection opened on the thread that will hold it (a corrupt file fails here)."""
        worker = Worker("toolspoke-db-writer" if writer else "toolspoke-db-reader")
        opening = functools.partial(connect, path, writer=writer, synchronous=self.synchronous)
        try:
            conn = await worker.call(opening)
        except BaseException:
            await asyncio.to_thread(worker.stop)
            raise
        handle = Handle(conn, worker)
        self._all.append(handle)
        return handle

    async def close(self) -> None:
        probe_conn, self._probe = self._probe, None
        if probe_conn is not None:
            probe_conn.close()
        self._loop_memo.clear()
        handles, self._all = self._all, []
        self._writer = None
        for h in handles:
            with contextlib.suppress(Exception):
                await h.call(h.conn.close)
            await asyncio.to_thread(h.worker.stop)

    async def checkpoint(self) -> None:
        """Fold the WAL back into the database file after a large write.

        Readers look pages up through the WAL index while it holds them; after an import of
        thousands of tools that made every search measurably slower until SQLite's own
        checkpoint caught up.
        """
        writer = self._writer
        assert writer is not None, "database is not open"
        async with self._write_lock:
            try:
                # Read to the end at once: a statement left stepping blocks the next COMMIT.
                await writer.call(fetch_all, writer.conn, "PRAGMA wal_checkpoint(PASSIVE)", ())
            except sqlean.OperationalError as exc:
                log.warning("checkpoint skipped: %s", exc)

    def one_look(self) -> contextlib.AbstractContextManager[None]:
        """Within this block, this task's ``memo()`` is the one looked up on entering it
        (``LoopMemo.pin``): one look at the generation per request. Tasks started inside
        the block look for themselves (a long-lived task must never keep a request's memo).
        """
        return self._loop_memo.pin()

    async def quick_check(self) -> list[str]:
        """SQLite's ``PRAGMA quick_check`` (every page read): ``["ok"]`` or what is damaged."""
        handle = await self._readers.get()
        try:
            rows = await handle.call(fetch_all, handle.conn, "PRAGMA quick_check(5)", ())
        except sqlean.DatabaseError as exc:
            return [str(exc)]
        finally:
            self._readers.put_nowait(handle)
        return [str(r[0]) for r in rows]

    def memo(self) -> dict[Hashable, Any]:
        """A scratch dict for this process that stays valid until the database changes.

        Cleared whenever the cache generation moves (``db/generation.py``), which it does
        after any commit that changed more than the call records, by any connection or
        process (the writer here, the CLI beside a serving appliance); audit rows and
        charges, committed after every call, leave it alone. The look runs on the event
        loop itself, at most once per turn of the loop (``db/memo.py``).
        """
        return self._loop_memo.get()

    def _look(self) -> int | None:
        """The cache generation, read on the writer's connection when it is idle, else on
        the probe's.

        Why the writer first: a connection drops its page cache whenever another connection
        has committed, and the writer commits every call's audit row, so on the probe each
        look re-read its pages (55 µs a look against 15 µs, profiled with one client
        calling). The writer's own commits leave its cache warm; another process's commit
        is seen by it the same way (WAL), so what it reads is the same counter. Idle means
        its lock is free: every use of the writer holds that lock and waits for its
        thread's work to end (``Worker.call``), so its thread is not using the connection
        now. Its ``busy_timeout`` is 0 (``sqlite.begin``), as the probe's: the loop never
        waits on a lock.
        """
        writer = self._writer
        if writer is not None and not self._write_lock.locked():
            return generation.read(writer.conn, self._counter_sql)
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

    async def remembered(self, key: Hashable, fn: Callable[[SyncReader], T]) -> T:
        """``fn`` over a reader in one hop, remembered under ``key`` until the database
        changes: no hop at all while it is remembered."""
        memo = self.memo()
        if key in memo:
            return cast(T, memo[key])
        value = await self.reading(fn)
        memo[key] = value
        return value

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[ReadConn]:
        handle = await self._readers.get()
        try:
            yield ReadConn(handle)
        finally:
            self._readers.put_nowait(handle)

    async def reading(self, fn: Callable[[SyncReader], T]) -> T:
        """``fn`` over a reader, in one thread hop."""
        handle = await self._readers.get()
        try:
            return await ReadConn(handle).batch(fn)
        finally:
            self._readers.put_nowait(handle)

    async def writing(self, fn: Callable[[SyncWriter], T]) -> T:
        """``fn`` over the writer, in one transaction and one thread hop (``write_batch``)."""
        return await self.write_batch(fn)

    async def write_batch(self, fn: Callable[[SyncWriter], T]) -> T:
        """``fn`` inside ``BEGIN IMMEDIATE`` … ``COMMIT`` on the writer, in one thread hop.

        ``write()`` costs a hop for BEGIN, one per statement and one for COMMIT; the ledger's
        group commit runs after every call, so it writes its batch this way. ``fn`` runs in
        the writer's thread and must not touch the event loop; if it raises, nothing of it
        is committed.
        """
        writer = self._writer
        assert writer is not None, "database is not open"
        async with self._write_lock:
            try:
                result = await writer.call(run_transaction, writer, fn)
            except sqlean.OperationalError as exc:
                self._write_failed(exc)
                raise _storage_error(exc) from exc
            except BaseException as exc:
                self._write_failed(exc)  # a disk fault SQLite calls CORRUPT, say, as write() does
                raise
            self.generation += 1
            return result

    def _write_failed(self, exc: BaseException) -> None:
        reason = disk_failure(exc)
        if reason is not None:
            self.storage.failed(reason)

    async def probe_write(self) -> bool:
        """A real write (one page through the WAL), to learn whether the disk takes writes
        again after one failed; clears ``storage.failing`` when it does."""
        writer = self._writer
        assert writer is not None, "database is not open"
        async with self._write_lock:
            try:
                await writer.call(probe, writer.conn)
            except sqlean.Error as exc:
                if disk_failure(exc) is not None:
                    self.storage.failed(str(exc))
                return False
        self.storage.recovered()
        return True

    def write_now(self, fn: Callable[[SyncWriter], T]) -> tuple[T] | None:
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
        try:
            try:
                writer.conn.execute("BEGIN IMMEDIATE")  # busy_timeout is 0: no wait here
            except sqlean.OperationalError as exc:
                if is_busy(exc):
                    return None  # another process is writing: wait for it on the thread
                raise
            result = run_begun(writer, fn)
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
        writer = self._writer
        assert writer is not None, "database is not open"
        async with self._write_lock:
            try:
                await writer.call(begin, writer.conn)
            except sqlean.OperationalError as exc:
                raise _storage_error(exc) from exc
            try:
                yield WriteTx(writer)
            except BaseException as exc:
                self._write_failed(exc)
                with contextlib.suppress(Exception):
                    await writer.call(finish, writer.conn, "ROLLBACK")
                raise
            try:
                await writer.call(finish, writer.conn, "COMMIT")
            except sqlean.OperationalError as exc:
                self._write_failed(exc)
                with contextlib.suppress(Exception):
                    await writer.call(finish, writer.conn, "ROLLBACK")
                raise _storage_error(exc) from exc
            self.generation += 1


if TYPE_CHECKING:

    def _implements_the_seam(
        db: Database, conn: ReadConn, tx: WriteTx, r: SyncReader, w: SyncWriter
    ) -> tuple[Store, AsyncReader, AsyncWriter, Reader, Writer]:
        """mypy's proof that SQLite's classes implement every protocol of ``db/seam.py``."""
        return db, conn, tx, r, w
