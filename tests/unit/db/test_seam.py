"""The storage seam: a function over a reader or the writer is one thread hop, a statement is
one hop, a remembered lookup none; the worker never leaves work half-done on a connection;
no library's private attribute is used anywhere in appliance/."""

from __future__ import annotations

import ast
import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import pytest

from appliance.db import Database, Reader, Store, Writer, seam
from appliance.db.memo import LoopMemo, Memo
from appliance.db.migrate import default_migrations_dir
from appliance.db.worker import Worker

T = TypeVar("T")
APPLIANCE = Path(__file__).resolve().parents[3] / "appliance"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


def with_db(path: Path, body: Callable[[Database], Awaitable[T]]) -> T:
    async def main() -> T:
        db = Database(path)
        await db.open(default_migrations_dir())
        try:
            return await body(db)
        finally:
            await db.close()

    return run(main())


def three_reads(r: Reader) -> tuple[int, int, int]:
    a = r.one("SELECT count(*) FROM users")[0]
    b = r.one("SELECT count(*) FROM toolkits")[0]
    c = len(r.all("SELECT id FROM projects"))
    return a, b, c


def test_a_function_over_a_reader_or_the_writer_is_one_hop_however_many_statements(tmp_path: Path) -> None:
    async def body(db: Database) -> None:
        before = db.hops
        assert await db.reading(three_reads) == (0, 0, 1)
        assert db.hops - before == 1

        def write(w: Writer) -> int:
            w.run("INSERT INTO users (name) VALUES ('a')")
            w.run_many("INSERT INTO users (name) VALUES (?)", [("b",), ("c",)])
            return int(w.one("SELECT count(*) FROM users")[0])

        before = db.hops
        assert await db.writing(write) == 3
        assert db.hops - before == 1  # BEGIN, three statements, COMMIT: one hop
        assert await db.reading(three_reads) == (3, 0, 1)

    with_db(tmp_path / "t.db", body)


def test_each_statement_of_the_statement_api_is_one_hop(tmp_path: Path) -> None:
    """aiosqlite's ``async with execute(...)`` + ``fetchall`` cost three hops a statement."""

    async def body(db: Database) -> None:
        async with db.read() as conn:
            before = db.hops
            assert (await conn.one("SELECT 41 + 1"))[0] == 42
            assert len(await conn.all("SELECT id FROM projects")) == 1
            assert db.hops - before == 2
        before = db.hops
        async with db.write() as tx:
            assert await tx.run("INSERT INTO users (name) VALUES ('x')") > 0
        assert db.hops - before == 3  # BEGIN, the statement, COMMIT

    with_db(tmp_path / "t.db", body)


def test_a_remembered_lookup_costs_one_hop_then_none_until_the_database_changes(tmp_path: Path) -> None:
    async def body(db: Database) -> None:
        before = db.hops
        assert await db.remembered("counts", three_reads) == (0, 0, 1)
        assert db.hops - before == 1
        assert await db.remembered("counts", three_reads) == (0, 0, 1)
        assert db.hops - before == 1  # from the memo
        await db.writing(lambda w: w.run("INSERT INTO users (name) VALUES ('x')"))
        await asyncio.sleep(0)  # a new turn of the loop: the memo looks again
        assert await db.remembered("counts", three_reads) == (1, 0, 1)

    with_db(tmp_path / "t.db", body)


def test_a_cancelled_caller_waits_until_its_job_has_left_the_connection() -> None:
    """Cancelled mid-job, ``Worker.call`` returns only once the thread is done with it: the
    connection's next user (the writer's lock released, a reader lent again) is alone on it."""

    async def main() -> None:
        worker = Worker("test-worker")
        started, release, finished = threading.Event(), threading.Event(), threading.Event()

        def job() -> None:
            started.set()
            release.wait(10)
            finished.set()

        try:
            task = asyncio.create_task(worker.call(job))
            assert await asyncio.to_thread(started.wait, 10)
            task.cancel()
            for _ in range(20):  # turns of the loop, not time: the task must stay parked
                await asyncio.sleep(0)
            assert not task.done(), "the caller left while its job still ran on the connection"
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert finished.is_set()
            assert await worker.call(lambda: 7) == 7  # still serving
        finally:
            release.set()
            await asyncio.to_thread(worker.stop)

    run(main())


def test_an_exception_in_a_function_reaches_its_caller_and_nothing_of_it_is_committed(tmp_path: Path) -> None:
    async def body(db: Database) -> None:
        def half(w: Writer) -> None:
            w.run("INSERT INTO users (name) VALUES ('half')")
            raise LookupError("stop here")

        with pytest.raises(LookupError, match="stop here"):
            await db.writing(half)
        assert await db.reading(lambda r: r.one("SELECT count(*) FROM users")[0]) == 0
        assert await db.writing(lambda w: w.run("INSERT INTO users (name) VALUES ('ok')")) > 0

    with_db(tmp_path / "t.db", body)


def test_the_connection_memo_is_handed_out_fresh_when_the_generation_moves() -> None:
    memo = Memo()
    first = memo.at(1)
    first["k"] = "v"
    assert memo.at(1) is first
    assert memo.at(2) == {}
    assert memo.at(2) is not first


def test_the_loop_memo_looks_once_per_turn_and_a_pin_holds_for_its_task_only() -> None:
    looks: list[int] = []
    state = {"generation": 1}

    def look() -> int:
        looks.append(state["generation"])
        return state["generation"]

    async def main() -> None:
        memo = LoopMemo(look, OSError)
        memo.get()["k"] = "v"
        memo.get()
        assert looks == [1]  # one look this turn
        state["generation"] = 2
        await asyncio.sleep(0)
        assert "k" not in memo.get()
        memo.get()["k"] = "pinned"
        with memo.pin():
            state["generation"] = 3
            await asyncio.sleep(0)
            assert memo.get()["k"] == "pinned"  # the request keeps its look

            async def other() -> dict[Any, Any]:
                return memo.get()

            assert "k" not in await asyncio.create_task(other())  # a task of its own looks
        await asyncio.sleep(0)
        assert "k" not in memo.get()

    run(main())


def test_a_failed_look_trusts_nothing_remembered() -> None:
    def look() -> int:
        raise OSError("disk gone")

    async def main() -> None:
        memo = LoopMemo(look, OSError)
        memo.get()["k"] = "v"
        assert memo.get() == {}

    run(main())


def test_the_database_has_every_member_of_the_seam() -> None:
    """``Store``, ``Reader``, ``Writer`` are what a second engine would implement; SQLite's
    classes must have every one of their members (mypy checks the signatures)."""
    from appliance.db import SyncReader, SyncWriter

    for protocol, cls in ((Store, Database), (Reader, SyncReader), (Writer, SyncWriter)):
        members = {n for n in vars(protocol) if not n.startswith("_")} | set(
            getattr(protocol, "__annotations__", {})
        )
        assert members, protocol
        for name in members - {"memo", "generation"}:
            assert callable(getattr(cls, name, None)), f"{cls.__name__} lacks {name}"
    assert seam.__doc__ and "second engine" in seam.__doc__


def _library_private_names() -> set[str]:
    """aiosqlite's private names: its classes' and a connection's own (``_conn``, ``_tx`` …)."""
    names: set[str] = set()
    for cls in (aiosqlite.Connection, aiosqlite.Cursor):
        names |= {n for n in vars(cls) if n.startswith("_") and not n.startswith("__")}
    unopened = aiosqlite.Connection(lambda: None, 64)  # type: ignore[arg-type, return-value]
    unopened._connection = None  # never opened: its __del__ stays quiet
    names |= {n for n in vars(unopened) if n.startswith("_") and not n.startswith("__")}
    return names


def test_no_module_of_appliance_touches_a_private_attribute_of_aiosqlite() -> None:
    private = _library_private_names()
    assert {"_execute", "_conn", "_connection", "_thread", "_tx"} <= private
    found = []
    for path in sorted(APPLIANCE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or node.attr not in private:
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue  # an object's own attribute, not the library's
            found.append(f"{path.relative_to(APPLIANCE)}:{node.lineno}: .{node.attr}")
    assert found == []


def test_the_private_attribute_check_finds_a_planted_use(tmp_path: Path) -> None:
    private = _library_private_names()
    tree = ast.parse("async def f(conn):\n    return await conn._execute(print, conn._conn)\n")
    hits = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in private]
    assert hits == ["_execute", "_conn"]


def test_a_key_is_authenticated_in_one_hop_and_then_in_none(tmp_path: Path) -> None:
    """The call path's first lookup: the key's row, its user and agent in one reader hop
    (three hops a statement before the seam), then from the memo without any."""
    from appliance.access import keys

    key = "tsk_cccccccc-test-key-0123456789abcdefghijklmnop"

    async def body(db: Database) -> None:
        async with db.write() as tx:
            await keys.add_key(tx, await keys.ensure_admin(tx), key)
        await asyncio.sleep(0)  # a new turn: the memo looks at the generation again
        before = db.hops
        principal = await keys.authenticate_cached(db, key)
        assert principal.is_admin
        assert db.hops - before == 1
        assert await keys.authenticate_cached(db, key) == principal
        assert db.hops - before == 1

    with_db(tmp_path / "t.db", body)
