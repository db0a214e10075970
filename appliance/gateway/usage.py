"""The search usage log as the gateway keeps it: which search result an agent then called.

Each ``search_tools`` use case by a keyed caller is noted here in memory (``searched``), with
the names it showed. A tool call by the same caller (same user and agent) within
``search_usage_window_s`` that names one of them settles the newest such search with that
rank (``called``, from the pipeline right after the name resolves: a dictionary look, no
await); a search no call settles within the window is a miss. Arguments are never seen
here: only the tool's name.

Why in memory first: the outcome is known only later, so a row written at search time would
need an update at call time, a database write on the call path. Settled searches are written
every ``FLUSH_S`` as one rider on the ledger's group commit (``Book.aside``): no call waits
for them and none reloads the book's figures for them; the table is exempt from the cache
generation, so remembered lookups survive too. Age and row bounds are applied in the same
transaction at most hourly. What is still open when the process stops is written as a miss;
a search in one process and the call in another (``toolspoke call``) are not linked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from appliance.db import SyncWriter
from appliance.models import Principal, Tool
from appliance.search import usage

if TYPE_CHECKING:
    from appliance.config import Settings
    from appliance.ledger.book import Book

log = logging.getLogger(__name__)

FLUSH_S = 2.0
PRUNE_EVERY_S = 3600.0
# Open searches held per caller and in all: beyond, the oldest is settled as a miss early.
OPEN_PER_CALLER = 32
OPEN_TOTAL = 10_000

Caller = tuple[int | None, int | None]  # (user id, agent id)


def _caller(p: Principal) -> Caller:
    return (p.user_id or None, p.agent_id)


class UsageLog:
    def __init__(self, settings: Settings, book: Book, *, clock: Callable[[], float] = time.time):
        self.enabled = settings.search_usage_log
        self.window_s = settings.search_usage_window_s
        self.keep_s = settings.search_usage_days * 86400
        self.keep_rows = settings.search_usage_max_rows
        self.book = book
        self.clock = clock
        self._open: dict[Caller, list[usage.Searched]] = {}
        self._opened = 0
        self._settled: list[usage.Searched] = []
        self._task: asyncio.Task[None] | None = None
        self._pruned_at = 0.0

    def records(self, principal: Principal) -> bool:
        """Only keyed callers' searches are logged: not the operator's CLI, not anonymous ones."""
        return self.enabled and not (principal.operator or principal.anonymous)

    def searched(self, principal: Principal, query: str, names: list[str]) -> None:
        """Note one search and the names it showed, best first."""
        if not self.records(principal):
            return
        now = self.clock()
        who = principal.name if principal.agent_id is None else f"{principal.agent_name} ({principal.name})"
        entry = usage.Searched(
            now,
            principal.user_id or None,
            principal.agent_id,
            who,
            query[: usage.MAX_QUERY],
            names[: usage.MAX_RESULTS],
            key=usage.normalised(query),  # of the whole query: the boost looks it up that way
        )
        pending = self._open.setdefault(_caller(principal), [])
        pending.append(entry)
        self._opened += 1
        if len(pending) > OPEN_PER_CALLER or self._opened > OPEN_TOTAL:
            self._settle(pending.pop(0))
        self._start()

    def called(self, principal: Principal, tool: Tool) -> None:
        """A call by ``principal`` resolved to ``tool``: the newest open search of that caller
        that showed it is settled with its rank. Only the newest: an older one that happened
        to show the tool (an unrelated search a minute before, listing it ninth) did not lead
        to this call, and crediting it would teach the boost a false pairing; it stays open
        (a later call may settle it) or becomes a miss."""
        if not self._open:
            return
        pending = self._open.get(_caller(principal))
        if not pending:
            return
        horizon = self.clock() - self.window_s
        for i in range(len(pending) - 1, -1, -1):
            entry = pending[i]
            if entry.at < horizon:
                return  # older ones are past the window too
            if tool.name in entry.results:
                entry.called, entry.called_id = tool.name, tool.id
                entry.rank = entry.results.index(tool.name) + 1
                del pending[i]
                self._settle(entry)
                return

    def _settle(self, entry: usage.Searched) -> None:
        self._opened -= 1
        self._settled.append(entry)

    def expire(self, *, everything: bool = False) -> None:
        """Open searches past the window (all of them, at close) are misses."""
        horizon = self.clock() - self.window_s
        for caller in list(self._open):
            pending = self._open[caller]
            while pending and (everything or pending[0].at < horizon):
                self._settle(pending.pop(0))
            if not pending:
                del self._open[caller]

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="search-usage")

    async def _run(self) -> None:
        while self._open or self._settled:
            await asyncio.sleep(FLUSH_S)
            self.expire()
            await self.flush()

    async def flush(self) -> int:
        """Write what is settled (one rider on the ledger's next commit); the rows written."""
        rows, self._settled = self._settled, []
        prune = self.clock() - self._pruned_at > PRUNE_EVERY_S
        if not rows and not prune:
            return 0
        before, keep = self.clock() - self.keep_s, self.keep_rows

        def work(w: SyncWriter) -> int:
            written = usage.insert_in(w, rows)
            if prune:
                usage.prune_in(w, before=before, keep=keep)
            return written

        try:
            written: int = await self.book.aside(work)
        except Exception as exc:  # noqa: BLE001 - a lost log batch must not stop the log
            log.warning("search usage rows could not be stored: %s", exc)
            return 0
        if prune:
            self._pruned_at = self.clock()
        return written

    async def aclose(self) -> None:
        """Stop: what is open is settled as a miss, and everything settled is written."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.expire(everything=True)
        if self._settled:
            await self.flush()
