"""The book on a real database: atomic reservations, exact ceilings, UTC windows, append-only entries."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlean

from appliance.db import Database, connection
from appliance.db.migrate import default_migrations_dir
from appliance.errors import Conflict, QuotaExhausted, StorageError
from appliance.ledger import store
from appliance.ledger.book import Book, Reservation
from appliance.ledger.store import AuditRow


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, at: float) -> None:
        self.now = at

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def opened(tmp: Path, clock: Callable[[], float] = time.time) -> AsyncIterator[tuple[Database, Book]]:
    db = Database(tmp / "t.db")
    await db.open(default_migrations_dir())
    async with db.write() as tx:
        await tx.run("INSERT INTO toolkits (project_id, slug, source_kind) VALUES (1, 'kit', 'openapi')")
        await tx.run("INSERT INTO users (name) VALUES ('payer')")
    book = Book(db, default_fee=1000, clock=clock)
    try:
        yield db, book
    finally:
        await book.aclose()
        await db.close()


async def price(book: Book, **kw: Any) -> None:
    fields = {"fee": 1000, "daily": 0, "monthly": 0, "unit": "calls", **kw}
    await book.admin(
        lambda r: store.upsert_price(
            r, 0.0, 1, fields["fee"], fields["daily"], fields["monthly"], fields["unit"]
        )
    )


async def grant(book: Book, milli: int) -> None:
    await book.admin(lambda r: store.insert_grant(r, 0.0, 1, milli, "test", ""))


def row(outcome: str = "ok") -> AuditRow:
    return AuditRow(0.0, 1, "payer", None, None, "tsk_x", 1, "kit", "default", "kit__a", None, outcome,
                    None, 1.0, 10, 0, False)  # fmt: skip


async def charge(book: Book, res: Reservation) -> None:
    await book.record(row(), res)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def test_fifty_concurrent_calls_against_a_ceiling_of_ten_reserve_exactly_ten_while_the_upstream_is_slow(
    tmp_path: Path,
) -> None:
    """LEDGER-01: reservations held in flight count against the ceiling."""

    async def scenario() -> None:
        async with opened(tmp_path) as (db, book):
            await price(book, daily=10)
            await grant(book, 1_000_000)
            release, all_refused = asyncio.Event(), asyncio.Event()
            refusals = []

            async def call() -> str:
                try:
                    res = await book.reserve(1, 1, toolkit="kit")
                except QuotaExhausted:
                    refusals.append(1)
                    if len(refusals) == 40:
                        all_refused.set()
                    raise
                await release.wait()  # the upstream takes its time; the reservation holds
                await charge(book, res)
                return "ok"

            tasks = [asyncio.create_task(call()) for _ in range(50)]
            await asyncio.wait_for(all_refused.wait(), 10)  # while ten are still in flight
            release.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            refused = [r for r in results if isinstance(r, QuotaExhausted)]
            assert results.count("ok") == 10 and len(refused) == 40
            assert refused[0].data["window"] == "daily" and refused[0].data["limit"] == 10
            async with db.read() as conn:
                total = await conn.one("SELECT count(*) AS n, -sum(amount_milli) AS m FROM ledger_entries"
                                       " WHERE kind = 'charge'")  # fmt: skip
            assert (total["n"], total["m"]) == (10, 10_000)

    run(scenario())


def test_a_hundred_jittered_runs_of_fifty_calls_from_three_payers_each_admit_exactly_ten(
    tmp_path: Path,
) -> None:
    """LEDGER-01, 100 times: 50 concurrent reservations from 3 payers against a ceiling of 10,
    released together, with random jitter before the check and while in flight; 100 runs,
    each on a fresh toolkit, each exact: 10 charged, 40 refused with the window, 50 audit
    rows, Σ charges = 10 fees, no balance below zero."""
    rng = random.Random(601)
    runs, calls, ceiling, fee = 100, 50, 10, 700

    async def scenario() -> None:
        db = Database(tmp_path / "t.db", synchronous="NORMAL")  # durability is not the question
        await db.open(default_migrations_dir())
        async with db.write() as tx:
            for n in range(runs):
                await tx.run(
                    "INSERT INTO toolkits (id, project_id, slug, source_kind) VALUES (?, 1, ?, 'openapi')",
                    (n + 1, f"kit{n}"),
                )
            for payer in range(3):
                await tx.run("INSERT INTO users (id, name) VALUES (?, ?)", (payer + 1, f"payer{payer}"))
        book = Book(db, default_fee=1000)
        try:
            for payer in (1, 2, 3):
                await book.admin(lambda r, p=payer: store.insert_grant(r, 0.0, p, 10_000_000, "t", ""))
            for n in range(runs):
                kit = n + 1
                await book.admin(lambda r, k=kit: store.upsert_price(r, 0.0, k, fee, ceiling, 0, "calls"))
                gate = asyncio.Event()

                async def call(i: int, kit: int = kit, gate: asyncio.Event = gate) -> str:
                    payer = 1 + i % 3
                    name = f"kit{kit - 1}"
                    audit = AuditRow(0.0, payer, f"payer{payer - 1}", None, None, "tsk_x", kit, name,
                                     "default", "a", None, "ok", None, 1.0, 10, 0, False)  # fmt: skip
                    await gate.wait()
                    for _ in range(rng.randint(0, 6)):  # jitter: other calls get ahead of this one
                        await asyncio.sleep(0)
                    try:
                        res = await book.reserve(kit, payer, toolkit=name)
                    except QuotaExhausted as exc:
                        assert exc.data["window"] == "daily" and exc.data["limit"] == ceiling
                        assert exc.data["resets_at"] and exc.data["remaining"] == 0
                        audit.outcome = "quota"
                        await book.record(audit)
                        return "refused"
                    for _ in range(rng.randint(0, 30)):  # the upstream takes its time
                        await asyncio.sleep(0)
                    await book.record(audit, res)
                    return "ok"

                tasks = [asyncio.create_task(call(i)) for i in range(calls)]
                gate.set()
                results = await asyncio.gather(*tasks)
                assert results.count("ok") == ceiling and results.count("refused") == calls - ceiling, n
                async with db.read() as conn:
                    got = await conn.one(
                        "SELECT (SELECT count(*) FROM ledger_entries"
                        " WHERE kind = 'charge' AND toolkit_id = ?) AS n,"
                        " (SELECT -sum(amount_milli) FROM ledger_entries WHERE toolkit_id = ?) AS m,"
                        " (SELECT count(*) FROM audit_log WHERE toolkit_id = ?) AS rows",
                        (kit, kit, kit),
                    )
                    lowest = await conn.one(
                        "SELECT min(b) AS b FROM"
                        " (SELECT sum(amount_milli) AS b FROM ledger_entries GROUP BY user_id)"
                    )
                assert (got["n"], got["m"], got["rows"]) == (ceiling, ceiling * fee, calls), n
                assert lowest["b"] >= 0
        finally:
            await book.aclose()
            await db.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=300))


@pytest.mark.parametrize(
    ("fee", "ceiling", "allowed"),
    [(100, 1000, 10), (1000, 1000, 1), (0, 1000, 50), (2000, 1000, 0), (300, 900, 3)],
    ids=["0.1 of 1.0", "fee = ceiling", "fee 0", "fee > ceiling", "0.3 of 0.9"],
)
def test_a_ceiling_in_credits_admits_exactly_what_integer_arithmetic_says(
    tmp_path: Path, fee: int, ceiling: int, allowed: int
) -> None:
    """LEDGER-03: exact arithmetic at the boundary (0.1 into 1.0 is ten calls)."""

    async def scenario() -> int:
        async with opened(tmp_path) as (_, book):
            await price(book, fee=fee, daily=ceiling, unit="credits")
            await grant(book, 1_000_000)
            admitted = 0
            for _ in range(50):
                try:
                    await charge(book, await book.reserve(1, 1, toolkit="kit"))
                    admitted += 1
                except QuotaExhausted:
                    pass
            return admitted

    assert run(scenario()) == allowed


def test_a_monthly_ceiling_holds_across_days_whose_daily_ceiling_would_allow_more(tmp_path: Path) -> None:
    """LEDGER-02, LEDGER-03: the monthly cap holds over days."""
    clock = Clock(utc("2026-03-01T12:00:00"))

    async def scenario() -> list[int]:
        async with opened(tmp_path, clock) as (_, book):
            await price(book, fee=1000, daily=1000, monthly=3000, unit="credits")
            await grant(book, 1_000_000)
            per_day = []
            for day in range(4):
                clock.now = utc("2026-03-01T12:00:00") + day * 86400
                admitted = 0
                for _ in range(3):
                    try:
                        await charge(book, await book.reserve(1, 1, toolkit="kit"))
                        admitted += 1
                    except QuotaExhausted as exc:
                        last = exc
                per_day.append(admitted)
            assert last.data["window"] == "monthly"
            assert last.data["resets_at"] == "2026-04-01T00:00:00Z"
            return per_day

    assert run(scenario()) == [1, 1, 1, 0]


@pytest.mark.parametrize("zone", ["KIR-14", "MAR+9:30"])
def test_calls_at_235959_and_000000_utc_use_different_days_whatever_the_server_zone(
    tmp_path: Path, zone: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LEDGER-02, RATE-04: quota windows follow the UTC wall clock."""
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    clock = Clock(utc("2026-12-31T23:59:59"))

    async def scenario() -> None:
        async with opened(tmp_path, clock) as (_, book):
            await price(book, daily=1, monthly=0)
            await grant(book, 10_000)
            await charge(book, await book.reserve(1, 1, toolkit="kit"))
            with pytest.raises(QuotaExhausted) as full:
                await book.reserve(1, 1, toolkit="kit")
            assert full.value.data["resets_at"] == "2027-01-01T00:00:00Z"
            clock.now = utc("2027-01-01T00:00:00")
            await charge(book, await book.reserve(1, 1, toolkit="kit"))  # a new day (and month)

    try:
        run(scenario())
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_ceiling_lowered_below_use_blocks_and_reports_nothing_remaining(tmp_path: Path) -> None:
    """LEDGER-02: a ceiling lowered below use blocks; remaining is 0, never negative."""

    async def scenario() -> None:
        async with opened(tmp_path) as (_, book):
            await price(book, daily=5)
            await grant(book, 100_000)
            for _ in range(4):
                await charge(book, await book.reserve(1, 1, toolkit="kit"))
            await price(book, daily=2)
            with pytest.raises(QuotaExhausted) as err:
                await book.reserve(1, 1, toolkit="kit")
            assert (err.value.data["used"], err.value.data["limit"], err.value.data["remaining"]) == (4, 2, 0)

    run(scenario())


def test_a_call_that_never_left_costs_nothing_and_uses_no_quota(tmp_path: Path) -> None:
    """LEDGER-06: a reservation is voided when the call never left."""

    async def scenario() -> None:
        async with opened(tmp_path) as (_, book):
            await price(book, daily=1)
            await grant(book, 1000)
            book.release(await book.reserve(1, 1, toolkit="kit"))
            await charge(book, await book.reserve(1, 1, toolkit="kit"))  # the one allowed call
            assert book.balances[1].milli == 0

    run(scenario())


def test_ledger_entries_cannot_be_edited_or_deleted_and_a_void_is_a_new_entry_given_once(
    tmp_path: Path,
) -> None:
    """LEDGER-06: voids are compensating entries, never deletes."""

    async def scenario() -> None:
        async with opened(tmp_path) as (db, book):
            await price(book, daily=1)
            await grant(book, 5000)
            await charge(book, await book.reserve(1, 1, toolkit="kit"))
            for sql in ("UPDATE ledger_entries SET amount_milli = 0", "DELETE FROM ledger_entries"):
                with pytest.raises(Exception, match="append-only"):
                    async with db.write() as tx:
                        await tx.run(sql)
            async with db.read() as conn:
                charge_id = (await conn.one("SELECT id FROM ledger_entries WHERE kind = 'charge'"))["id"]
            await book.admin(lambda r: store.insert_void(r, 0.0, charge_id, "test", "refund"))
            with pytest.raises(Conflict):
                await book.admin(lambda r: store.insert_void(r, 0.0, charge_id, "test", "again"))
            assert book.balances[1].milli == 5000  # credit back
            await charge(book, await book.reserve(1, 1, toolkit="kit"))  # quota back

    run(scenario())


def test_a_grant_written_by_another_process_is_seen_without_a_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with opened(tmp_path) as (_, book):
            await price(book, daily=0)
            with pytest.raises(QuotaExhausted):
                await book.reserve(1, 1, toolkit="kit")
            other = Database(tmp_path / "t.db")  # another connection: the CLI's
            await other.open(default_migrations_dir())
            async with other.write() as tx:
                await tx.run(
                    "INSERT INTO ledger_entries (at, user_id, kind, amount_milli)"
                    " VALUES (0, 1, 'grant', 1000)"
                )
            await other.close()
            await book.sync()  # the next batch (or the idle tick within a second) notices
            await book.sync()
            await charge(book, await book.reserve(1, 1, toolkit="kit"))

    run(scenario())


def test_audit_rows_older_than_the_retention_are_pruned_and_charges_stay(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with opened(tmp_path) as (db, book):
            book.audit_retention_s = 86400
            await grant(book, 5000)
            await charge(book, await book.reserve(1, 1, toolkit="kit"))
            old = row()
            old.at = time.time() - 2 * 86400
            await book.record(old)
            book._pruned_at = 0.0
            await book.sync()
            async with db.read() as conn:
                ages = await conn.all("SELECT at FROM audit_log")
                charges = await conn.one("SELECT count(*) AS n FROM ledger_entries WHERE kind = 'charge'")
            assert len(ages) == 1 and ages[0]["at"] > time.time() - 86400
            assert charges["n"] == 1

    run(scenario())


async def audit_count(db: Database) -> int:
    async with db.read() as conn:
        return int((await conn.one("SELECT count(*) AS n FROM audit_log"))["n"])


def test_a_lone_call_is_committed_on_the_loop_and_concurrent_calls_share_a_batch(tmp_path: Path) -> None:
    """The lone call's row is durable when ``record`` returns (no writer-thread hop); with more
    calls open, rows queue for the group commit exactly as before."""

    async def scenario() -> None:
        async with opened(tmp_path) as (db, book):
            await grant(book, 5000)
            before = db.inline_commits
            res = await book.reserve(1, 1, toolkit="kit")
            durable = book.record(row(), res, alone=True)
            assert durable.done() and db.inline_commits == before + 1
            assert await audit_count(db) == 1
            assert book.balances[1].milli == 4000 and book.balances[1].held_milli == 0
            queued = book.record(row(), alone=False)  # another call is open
            assert not queued.done() and db.inline_commits == before + 1
            await queued
            assert await audit_count(db) == 2

    run(scenario())


def test_a_commit_on_the_loop_steps_aside_while_another_process_writes_and_never_waits_for_it(
    tmp_path: Path,
) -> None:
    """Another process (the CLI) holding SQLite's write lock: the loop does not wait out the busy
    timeout; the row takes the writer thread and lands once the other process commits."""

    async def scenario() -> None:
        async with opened(tmp_path) as (db, book):
            other = sqlean.connect(str(tmp_path / "t.db"), isolation_level=None)
            other.execute("BEGIN IMMEDIATE")
            started = time.monotonic()
            durable = book.record(row(), alone=True)
            assert time.monotonic() - started < 0.5  # the busy timeout is 5 s
            assert not durable.done() and db.inline_commits == 0
            other.execute("COMMIT")
            other.close()
            await durable
            assert await audit_count(db) == 1
            async with db.write():  # this process's writer busy: the loop path steps aside too
                assert db.write_now(lambda r: r.one("SELECT 1")) is None

    run(scenario())


def test_a_slow_commit_on_the_loop_sends_the_next_ones_to_the_writer_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        async with opened(tmp_path) as (db, book):
            monkeypatch.setattr(connection, "INLINE_SLOW_S", -1.0)  # every commit counts as slow
            assert book.record(row(), alone=True).done()
            assert db.inline_commits == 1
            monkeypatch.setattr(connection, "INLINE_SLOW_S", 1.0)
            durable = book.record(row(), alone=True)
            assert not durable.done()
            await durable
            assert db.inline_commits == 1 and await audit_count(db) == 2

    run(scenario())


def test_a_failed_commit_on_the_loop_commits_nothing_and_reports_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a loaded machine the failing commit itself may take over the 5 ms that pauses inline
    # commits (a slow disk's rule, not this test's subject): the pause is kept out of it.
    monkeypatch.setattr(connection, "INLINE_SLOW_S", 60.0)

    async def scenario() -> None:
        async with opened(tmp_path) as (db, book):

            def work(r: Any) -> None:
                r.one("INSERT INTO users (name) VALUES ('half')")
                raise sqlean.OperationalError("disk I/O error")

            with pytest.raises(StorageError):
                db.write_now(work)
            async with db.read() as conn:
                assert await conn.one("SELECT 1 FROM users WHERE name = 'half'") is None
            # and the next lone call commits on the loop as before
            assert book.record(row(), alone=True).done() and await audit_count(db) == 1

    run(scenario())
