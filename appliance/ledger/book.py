"""The book: where each toolkit's windows and each user's balance stand, calls in flight included.

Why in memory: the spend check must be atomic with the reservation and must not cost a
database round trip per call. In one process on one event loop, a check and a reservation
made without an ``await`` between them are atomic; every reserved call is counted against
its windows and its payer's balance until its charge is committed or the call is let go,
so concurrency cannot overshoot a ceiling (RELIABILITY LEDGER-01).

The database stays the truth. Every write goes through ``Committer`` batches on the writer
(group commit: many calls' audit rows and charges in one durable transaction, acknowledged
only after it), and the figures are (re)loaded inside those same transactions, so a reload
can never miss or double a charge. The cache reloads when anything else wrote: another
writer in this process (``Database.generation``), or another process such as the CLI
(``PRAGMA data_version``, checked on every batch and on an idle tick each second).
A reservation is never written down: if the process dies, the call never reached the ledger
and the reservation is gone with it, which voids it (LEDGER-06).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from appliance.db import Database, SyncReader, SyncWriter
from appliance.errors import ApplianceError, NotFound, QuotaExhausted
from appliance.ledger import store, windows
from appliance.ledger.amounts import credits
from appliance.ledger.store import AuditRow, Price
from appliance.ledger.windows import Window

log = logging.getLogger(__name__)

TICK_S = 1.0  # how soon another process's change (a grant by the CLI) is seen when idle
MAX_BATCH = 512
PRUNE_EVERY_S = 3600.0


@dataclass
class Tally:
    calls: int = 0  # committed
    milli: int = 0  # committed (usage: charged; balance: sum of entries)
    held_calls: int = 0  # reserved, or charged and waiting for the commit
    held_milli: int = 0


@dataclass
class Reservation:
    toolkit_id: int
    payer: int
    fee: int
    at: float
    day: Window
    month: Window
    key: str | None = None  # the calling key's prefix, when the key has a budget of its own


@dataclass
class _Item:
    future: asyncio.Future[Any] | None = None


@dataclass
class _Call(_Item):
    row: AuditRow | None = None
    reservation: Reservation | None = None


@dataclass
class _Load(_Item):
    toolkit_ids: tuple[int, ...] = ()
    payer: int | None = None
    windows: tuple[Window, ...] = ()
    key: str | None = None


@dataclass
class _Admin(_Item):
    work: Callable[[SyncWriter], Any] | None = None
    reload: bool = True  # False: a rider (``aside``) that changes no figure


@dataclass
class _Snapshot:
    prices: dict[int, Price | None] = field(default_factory=dict)
    usage: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)
    balances: dict[int, int] = field(default_factory=dict)
    keys: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Budget:
    """A key's budget of its own (issue 20): its prefix and the millicredits it may spend."""

    key: str
    milli: int


@dataclass
class Standing:
    """What a payer's next calls of some toolkits face: prices, windows, credit, key budget."""

    prices: dict[int, Price]
    day: Window
    month: Window
    usage: dict[tuple[int, str], Tally]
    purse: Tally
    key: Tally | None
    budget: Budget | None

    def calls_left(self, toolkit_id: int, fee: int) -> int | None:
        """How many more calls at ``fee`` the ceilings let through now (None: none applies)."""
        return _headroom(self.prices[toolkit_id], self.usage, self.day, self.month, fee, self.purse,
                         self.key, self.budget)  # fmt: skip


class Book:
    def __init__(
        self,
        db: Database,
        *,
        default_fee: int,
        audit_retention_s: float = 0.0,
        clock: Callable[[], float] = time.time,
    ):
        self.db = db
        self.default_fee = default_fee
        self.audit_retention_s = audit_retention_s
        self.clock = clock
        self.prices: dict[int, Price] = {}
        self.usage: dict[tuple[int, str], Tally] = {}
        self.spans: dict[str, Window] = {}  # window key → its bounds, for reloads
        self.balances: dict[int, Tally] = {}
        self.keys: dict[str, Tally] = {}  # keys with a budget: spent (milli) and held
        self._queue: list[_Item] = []
        self._waiter: asyncio.Future[bool] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._generation = -1  # Database.generation after our last commit
        self._data_version: int | None = None
        self._pruned_at = 0.0

    # -- the spend check ---------------------------------------------------------------

    async def price(self, toolkit_id: int, *, toolkit: str) -> Price:
        """The toolkit's fee, ceilings and owner, as of the last commit."""
        if self._needs_load(toolkit_id, None, ()):
            await self._submit(_Load(toolkit_ids=(toolkit_id,)))
        price = self.prices.get(toolkit_id)
        if price is None:
            raise NotFound(f"toolkit {toolkit!r} was removed", field="toolkit")
        return price

    async def reserve(
        self,
        toolkit_id: int,
        payer: int,
        *,
        toolkit: str,
        tool: str = "",
        kind: str = "",
        budget: Budget | None = None,
    ) -> Reservation:
        """Quota, then the key's budget, then balance, then hold: atomic (no await between
        check and hold). The fee is the tool's (``Price.fee_for``: tool, kind, toolkit)."""
        at = self.clock()
        day, month = windows.day(at), windows.month(at)
        key = None if budget is None else budget.key
        if self._needs_load(toolkit_id, payer, (day, month), key):
            await self._submit(_Load(toolkit_ids=(toolkit_id,), payer=payer, windows=(day, month), key=key))
        price = self.prices.get(toolkit_id)
        if price is None:
            raise NotFound(f"toolkit {toolkit!r} was removed", field="toolkit")
        need_calls, need_milli = 1, price.fee_for(tool, kind)
        for window, limit in ((day, price.daily), (month, price.monthly)):
            if not limit:
                continue
            t = self.usage[(toolkit_id, window.key)]
            used = t.calls + t.held_calls if price.unit == "calls" else t.milli + t.held_milli
            need = need_calls if price.unit == "calls" else need_milli
            if used + need > limit:
                raise _exhausted(toolkit, window, limit, used, price.unit)
        spent = None if budget is None else self.keys[budget.key]
        if budget is not None and spent is not None:
            used = spent.milli + spent.held_milli
            if used + need_milli > budget.milli:
                raise _over_budget(toolkit, budget.milli, used, need_milli)
        purse = self.balances[payer]
        available = purse.milli - purse.held_milli
        if need_milli > available:
            raise QuotaExhausted(
                f"not enough credit for {toolkit!r}: a call costs {credits(need_milli)}, "
                f"the balance available is {credits(max(available, 0))}; ask an admin for credit",
                data={
                    "window": "credit",
                    "limit": credits(max(purse.milli, 0)),
                    "used": credits(purse.held_milli),
                    "fee": credits(need_milli),
                    "balance": credits(max(available, 0)),
                    "resets_at": None,
                    "toolkit": toolkit,
                },
            )
        for window in (day, month):
            t = self.usage[(toolkit_id, window.key)]
            t.held_calls += need_calls
            t.held_milli += need_milli
        purse.held_milli += need_milli
        if spent is not None:
            spent.held_milli += need_milli
        return Reservation(toolkit_id, payer, need_milli, at, day, month, key)

    async def standing(self, toolkit_ids: list[int], payer: int, budget: Budget | None = None) -> Standing:
        """The figures ``Standing.calls_left`` reads for these toolkits and this payer, loaded
        in one batch when any is missing (search and describe show them: ``gateway/costs.py``).
        A toolkit removed meanwhile is left out."""
        at = self.clock()
        day, month = windows.day(at), windows.month(at)
        key = None if budget is None else budget.key
        if any(self._needs_load(kit, payer, (day, month), key) for kit in toolkit_ids):
            await self._submit(
                _Load(toolkit_ids=tuple(toolkit_ids), payer=payer, windows=(day, month), key=key)
            )
        prices = {kit: self.prices[kit] for kit in toolkit_ids if kit in self.prices}
        # Nothing is added to the book here: an entry it holds means "loaded".
        usage = {
            k: self.usage.get(k) or Tally() for kit in prices for k in ((kit, day.key), (kit, month.key))
        }
        purse = self.balances.get(payer) or Tally()
        spent = None if key is None else self.keys.get(key) or Tally()
        return Standing(prices, day, month, usage, purse, spent, budget)

    def release(self, res: Reservation) -> None:
        """The call never left: let the reservation go (nothing is written)."""
        self._unhold(res)

    def record(
        self, row: AuditRow, res: Reservation | None = None, *, alone: bool = False
    ) -> asyncio.Future[Any]:
        """Queue an audit row (and, with a reservation, its charge); resolves once durable.

        ``alone``: the caller knows no other call is between its start and its
        acknowledgement, so there is no batch to share: the row may commit on the loop
        (``_commit_now``). Concurrent calls leave it False and share a group commit.
        """
        if res is not None:
            row.fee = res.fee
            row.at = res.at  # the charge counts in the window it was checked against
        item = _Call(row=row, reservation=res)
        if alone and not self._queue and not self._prune_due():
            done = self._commit_now(item)
            if done is not None:
                return done
        return self._submit(item)

    async def admin(self, work: Callable[[SyncReader], Any]) -> Any:
        """Run a ledger write (grant, void, price) in the next batch; figures reload after it."""
        return await self._submit(_Admin(work=work))

    def aside(self, work: Callable[[SyncWriter], Any]) -> asyncio.Future[Any]:
        """Run a write that changes no ledger figure (the search usage log) in the next batch.

        Why here rather than a transaction of its own: the book reloads its figures after any
        commit it did not make (``Database.generation``), so a separate write would cost the
        next call a reload; riding in a batch costs no call anything, and concurrent calls'
        rows share the commit."""
        return self._submit(_Admin(work=work, reload=False))

    async def sync(self) -> None:
        """Wait until everything queued so far is durable."""
        if self._queue or (self._task is not None and not self._task.done()):
            await self._submit(_Load())

    async def figures(self, toolkit_id: int, *, toolkit: str) -> tuple[Price, Tally, Tally, Window, Window]:
        """A toolkit's price and its current day and month, calls in flight included."""
        at = self.clock()
        day, month = windows.day(at), windows.month(at)
        if self._needs_load(toolkit_id, None, (day, month)):
            await self._submit(_Load(toolkit_ids=(toolkit_id,), windows=(day, month)))
        price = self.prices.get(toolkit_id)
        if price is None:
            raise NotFound(f"toolkit {toolkit!r} was removed", field="toolkit")
        return price, self.usage[(toolkit_id, day.key)], self.usage[(toolkit_id, month.key)], day, month

    def tally(self, toolkit_id: int, window: Window) -> Tally | None:
        return self.usage.get((toolkit_id, window.key))

    async def aclose(self) -> None:
        self._closing = True
        if self._waiter is not None:
            _settle_waiter(self._waiter, True)
        if self._task is not None:
            await self._task

    # -- internals -------------------------------------------------------------------------

    def _needs_load(
        self, toolkit_id: int, payer: int | None, spans: tuple[Window, ...], key: str | None = None
    ) -> bool:
        if self.db.generation != self._generation:
            return True  # someone else in this process wrote: reload before trusting figures
        if toolkit_id not in self.prices or (payer is not None and payer not in self.balances):
            return True
        if key is not None and key not in self.keys:
            return True
        return any((toolkit_id, w.key) not in self.usage for w in spans)

    def _unhold(self, res: Reservation) -> None:
        for window in (res.day, res.month):
            t = self.usage.get((res.toolkit_id, window.key))
            if t is not None:
                t.held_calls -= 1
                t.held_milli -= res.fee
        purse = self.balances.get(res.payer)
        if purse is not None:
            purse.held_milli -= res.fee
        spent = None if res.key is None else self.keys.get(res.key)
        if spent is not None:
            spent.held_milli -= res.fee

    def _submit(self, item: _Item) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        item.future = loop.create_future()
        self._queue.append(item)
        if self._waiter is not None:
            _settle_waiter(self._waiter, True)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name="ledger-committer")
        return item.future

    async def _run(self) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                woken = await self._woken(TICK_S)
                if not woken and self.db.storage.failing is not None:
                    await self._probe()  # calls are refused until the disk takes writes again
                if not woken and not (self.prices or self.balances or self._prune_due()):
                    continue
            items, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            try:
                await self._commit(items)
            except Exception as exc:  # noqa: BLE001 - every waiter learns; the loop goes on
                self._failed(items, exc)

    async def _woken(self, wait_s: float) -> bool:
        """Wait for a submission (True) or the idle tick (False). A timer on a bare future:
        ``wait_for`` would make a task per wait, and this runs once per group commit."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiter = waiter
        tick = loop.call_later(wait_s, _settle_waiter, waiter, False)
        try:
            return await waiter
        finally:
            tick.cancel()
            self._waiter = None

    async def _probe(self) -> None:
        try:
            await self.db.probe_write()
        except Exception as exc:  # noqa: BLE001 - the next tick tries again
            log.warning("storage probe failed: %s", exc)

    def _prune_due(self) -> bool:
        return self.audit_retention_s > 0 and self.clock() - self._pruned_at > PRUNE_EVERY_S

    async def _commit(self, items: list[_Item]) -> None:
        work, prune_before = self._prepare(items)
        self._finish(items, await self.db.write_batch(work), prune_before)

    def _commit_now(self, item: _Call) -> asyncio.Future[Any] | None:
        """A lone call's row committed on the event loop itself; None when that cannot be now.

        Why: with one call in flight there is no batch to share, and the writer thread's
        hop there and back (two thread wake-ups, ~0.2 ms here) cost more than the commit
        itself. ``Database.write_now`` declines when the writer is busy, another process
        holds the write lock, or commits have lately been slow (then the loop must not
        wait on the disk); the call then takes the group-commit path as before.
        """
        work, _ = self._prepare([item], prune=False)
        loop = asyncio.get_running_loop()
        try:
            out = self.db.write_now(work)
        except Exception as exc:  # noqa: BLE001 - the caller learns through the future
            item.future = loop.create_future()
            self._failed([item], exc)
            return item.future
        if out is None:
            return None
        item.future = loop.create_future()
        self._finish([item], out[0], None)
        return item.future

    def _prepare(
        self, items: list[_Item], *, prune: bool = True
    ) -> tuple[Callable[[SyncWriter], tuple[int, list[Any], bool, _Snapshot]], float | None]:
        """The batch's transaction body, and the audit cut-off when a prune is due."""
        for item in items:
            if isinstance(item, _Load):
                for w in item.windows:
                    self.spans.setdefault(w.key, w)
        cached = (list(self.prices), list(self.usage), list(self.balances), list(self.keys))
        prune_before = self.clock() - self.audit_retention_s if prune and self._prune_due() else None

        def work(r: SyncWriter) -> tuple[int, list[Any], bool, _Snapshot]:
            # Inside the transaction: no other writer of this process can commit now.
            stale = self.db.generation != self._generation
            version = int(r.one("PRAGMA data_version")[0])
            reload = stale or (self._data_version is not None and version != self._data_version)
            results: list[Any] = []
            wanted: list[_Load] = []
            for item in items:
                if isinstance(item, _Call):
                    assert item.row is not None
                    payer = item.reservation.payer if item.reservation else None
                    results.append(store.insert_call(r, item.row, payer))
                elif isinstance(item, _Admin):
                    assert item.work is not None
                    try:
                        results.append(item.work(r))
                        reload = reload or item.reload
                    except ApplianceError as exc:  # checked before writing: nothing partial
                        results.append(exc)
                else:
                    assert isinstance(item, _Load)
                    wanted.append(item)
                    results.append(None)
            if prune_before is not None:
                store.prune_audit(r, prune_before)
            return version, results, reload, self._load(r, wanted, cached if reload else None)

        return work, prune_before

    def _finish(
        self, items: list[_Item], out: tuple[int, list[Any], bool, _Snapshot], prune_before: float | None
    ) -> None:
        """After a durable commit: settle the reservations, install the figures, wake the waiters."""
        version, results, reload, snap = out
        self._generation = self.db.generation
        self._data_version = version
        if prune_before is not None:
            self._pruned_at = self.clock()
        for item in items:
            if isinstance(item, _Call) and item.reservation is not None:
                self._settle(item.reservation, count=not reload)
        self._install(snap)
        for item, result in zip(items, results, strict=True):
            assert item.future is not None
            if item.future.done():
                continue
            if isinstance(result, ApplianceError):
                item.future.set_exception(result)
            else:
                item.future.set_result(result)

    def _load(
        self,
        r: SyncReader,
        wanted: list[_Load],
        cached: tuple[list[int], list[tuple[int, str]], list[int], list[str]] | None,
    ) -> _Snapshot:
        snap = _Snapshot()
        kits: set[int] = set()
        spans: set[tuple[int, str]] = set()
        payers: set[int] = set()
        keys: set[str] = set()
        for item in wanted:
            for kit in item.toolkit_ids:
                kits.add(kit)
                for w in item.windows:
                    spans.add((kit, w.key))
            if item.payer is not None:
                payers.add(item.payer)
            if item.key is not None:
                keys.add(item.key)
        if cached is not None:  # reload everything we hold
            kits.update(cached[0])
            spans.update(cached[1])
            payers.update(cached[2])
            keys.update(cached[3])
        for kit in kits:
            snap.prices[kit] = store.load_price(r, kit, self.default_fee)
        for kit, key in spans:
            span = self.spans[key]
            snap.usage[(kit, key)] = store.window_usage(r, kit, span.start, span.end)
        for payer in payers:
            snap.balances[payer] = store.balance(r, payer)
        for key in keys:
            snap.keys[key] = store.key_spent(r, key)
        return snap

    def _install(self, snap: _Snapshot) -> None:
        for kit, price in snap.prices.items():
            if price is None:
                self.prices.pop(kit, None)
            else:
                self.prices[kit] = price
        for key, (calls, milli) in snap.usage.items():
            t = self.usage.setdefault(key, Tally())
            t.calls, t.milli = calls, milli
        for payer, amount in snap.balances.items():
            self.balances.setdefault(payer, Tally()).milli = amount
        for prefix, spent in snap.keys.items():
            self.keys.setdefault(prefix, Tally()).milli = spent

    def _settle(self, res: Reservation, *, count: bool) -> None:
        """A charge is durable: move it from held to committed (a reload already counted it)."""
        self._unhold(res)
        if not count:
            return
        for window in (res.day, res.month):
            t = self.usage.get((res.toolkit_id, window.key))
            if t is not None:
                t.calls += 1
                t.milli += res.fee
        purse = self.balances.get(res.payer)
        if purse is not None:
            purse.milli -= res.fee
        spent = None if res.key is None else self.keys.get(res.key)
        if spent is not None:
            spent.milli += res.fee

    def _failed(self, items: list[_Item], exc: Exception) -> None:
        log.error("ledger commit failed: %s", exc)
        error = exc if isinstance(exc, ApplianceError) else ApplianceError("ledger commit failed")
        for item in items:
            if isinstance(item, _Call) and item.reservation is not None:
                self._unhold(item.reservation)
            if item.future is not None and not item.future.done():
                item.future.set_exception(error)


def _settle_waiter(waiter: asyncio.Future[bool], woken: bool) -> None:
    if not waiter.done():
        waiter.set_result(woken)


def _exhausted(toolkit: str, window: Window, limit: int, used: int, unit: str) -> QuotaExhausted:
    shown = (lambda v: v) if unit == "calls" else credits
    return QuotaExhausted(
        f"the {window.name} quota of {toolkit!r} is used up ({shown(min(used, limit))} of "
        f"{shown(limit)} {unit}); it resets at {window.resets_at}",
        data={
            "window": window.name,
            "limit": shown(limit),
            "used": shown(used),
            "remaining": 0,
            "unit": unit,
            "resets_at": window.resets_at,
            "toolkit": toolkit,
        },
    )


def _over_budget(toolkit: str, budget: int, used: int, fee: int) -> QuotaExhausted:
    return QuotaExhausted(
        f"this key's own budget is used up: it has spent {credits(min(used, budget))} of its "
        f"{credits(budget)} credits and a call of {toolkit!r} costs {credits(fee)}; ask for a key "
        "with a larger budget",
        data={
            "window": "key_budget",
            "limit": credits(budget),
            "used": credits(used),
            "fee": credits(fee),
            "remaining": credits(max(budget - used, 0)),
            "resets_at": None,
            "toolkit": toolkit,
        },
    )


def _headroom(
    price: Price,
    usage: dict[tuple[int, str], Tally],
    day: Window,
    month: Window,
    fee: int,
    purse: Tally,
    key: Tally | None,
    budget: Budget | None,
) -> int | None:
    """Calls at ``fee`` that ``reserve`` would still admit, by its own arithmetic (None: no
    ceiling applies: no quota in calls, and a fee of 0)."""
    left: list[int] = []
    for window, limit in ((day, price.daily), (month, price.monthly)):
        if not limit:
            continue
        t = usage.get((price.toolkit_id, window.key), Tally())
        if price.unit == "calls":
            left.append(limit - t.calls - t.held_calls)
        elif fee:
            left.append((limit - t.milli - t.held_milli) // fee)
    if fee:
        left.append((purse.milli - purse.held_milli) // fee)
        if budget is not None and key is not None:
            left.append((budget.milli - key.milli - key.held_milli) // fee)
    return max(min(left), 0) if left else None
