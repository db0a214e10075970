"""kill -9 during a load of paid calls, then restart, eight times over: nothing acknowledged
is lost (CRASH-01).

The load (tests/support/load.py) is raw stateless (2026-07-28) requests over httpx: each
request stands alone, so a worker learns at once that the server died (connection refused)
instead of waiting out a session, and an HTTP 200 with a result is exactly what
"acknowledged" means here. After every restart the database is sound (I-5), the books hold
(I-2) and every call acknowledged so far has its audit row and its charge.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.accounts import (
    MeteredUpstream,
    add_user_keys,
    admin,
    assert_charges_match_audit,
    credits_path,
    install,
    query,
)
from tests.support.load import PaidLoad
from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e
WORKERS = 20
KILLS = 8


def load_until_killed(app: Appliance, keys: list[str], tool: str, calls: int, acked: Counter[str]) -> None:
    """Paid calls from ``WORKERS`` workers; SIGKILL once ``calls`` more are acknowledged."""

    async def scenario() -> None:
        load = PaidLoad(app, keys, tool, workers=WORKERS)
        running = asyncio.create_task(load.run())
        try:
            await load.reach(calls, timeout=60)
            app.proc.kill()  # SIGKILL, wherever the server is
        finally:
            load.stop.set()
            await asyncio.wait_for(running, 60)  # each worker ends at its first unanswered request
        acked.update(load.acked)
        assert all(status == 200 for status, _ in load.other), load.other[:3]

    asyncio.run(asyncio.wait_for(scenario(), timeout=120))
    assert app.proc.wait(timeout=10) == -9


def assert_nothing_acknowledged_lost(app: Appliance, acked: Counter[str]) -> None:
    """I-5, I-2, and every acknowledged call audited `ok` and charged."""
    data = app.data_dir
    assert query(data, "PRAGMA integrity_check") == [("ok",)]
    assert query(data, "PRAGMA foreign_key_check") == []
    audited: dict[str, Any] = dict(
        query(data, "SELECT key_prefix, count(*) FROM audit_log WHERE outcome = 'ok' GROUP BY 1")
    )
    charged: dict[str, Any] = dict(
        query(
            data,
            "SELECT a.key_prefix, count(*) FROM ledger_entries e JOIN audit_log a ON a.id = e.audit_id"
            " WHERE e.kind = 'charge' GROUP BY 1",
        )
    )
    for prefix, n in acked.items():
        assert audited.get(prefix, 0) >= n, f"{prefix}: {n} acknowledged, {audited.get(prefix)} audited"
        assert charged.get(prefix, 0) >= n, f"{prefix}: {n} acknowledged, {charged.get(prefix)} charged"
    assert_charges_match_audit(data)
    # The balance the server reports is the sum of the entries, and never below zero.
    ((entries,),) = query(
        data,
        "SELECT sum(amount_milli) FROM ledger_entries e JOIN users u ON u.id = e.user_id"
        " WHERE u.name = 'load'",
    )
    shown = admin(app, "GET", credits_path(app, "load")).json()["balance"]
    assert shown * 1000 == entries >= 0


class Crashes:
    """The eight rounds, each a test of its own (so each stays within the per-test timeout),
    run once and in order on one data directory: a round runs the rounds before it first
    if they have not run (a test selected on its own)."""

    ENV = {
        "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
        "TOOLSPOKE_IMPORTS_PER_HOUR": "1000",
        "TOOLSPOKE_RATE_LIMIT": "100000",
    }

    def __init__(self, data: Path) -> None:
        self.data = data
        self.upstream = MeteredUpstream()
        self.seeded = random.Random()
        self.acked: Counter[str] = Counter()
        self.starts: list[float] = []
        self.done = 0
        self.keys: list[str] = []
        self.tool = ""
        self.broken = False

    def round(self, n: int) -> None:
        """Round 1: set up, load, kill. Round n > 1: restart, check, load, kill."""
        assert not self.broken, "an earlier round failed: the rounds after it cannot run"
        self.broken = True  # until this call ends well
        while self.done < n:
            if self.done == 0:
                with running_appliance(self.data, env=self.ENV) as app:
                    self.keys = add_user_keys(self.data, "load", 10)
                    assert (
                        admin(app, "POST", credits_path(app, "load"), {"amount": 100000}).status_code == 201
                    )
                    self.tool = install(app, "meter", self.upstream, fee=1)
                    load_until_killed(app, self.keys, self.tool, self.seeded.randint(10, 120), self.acked)
            else:
                began = time.monotonic()
                with running_appliance(self.data, env=self.ENV, start_timeout=30) as app:
                    self.starts.append(time.monotonic() - began)
                    assert_nothing_acknowledged_lost(app, self.acked)
                    load_until_killed(app, self.keys, self.tool, self.seeded.randint(10, 120), self.acked)
            self.done += 1
        self.broken = False


@pytest.fixture(scope="module")
def crashes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crashes]:
    made = Crashes(tmp_path_factory.mktemp("crashes") / "data")
    try:
        yield made
    finally:
        made.upstream.close()


@pytest.mark.parametrize("n", range(1, KILLS + 1))
def test_a_kill_9_during_load_loses_no_acknowledged_charge_or_audit_row(crashes: Crashes, n: int) -> None:
    """CRASH-01, I-2, I-5, LEDGER-06 (a killed call's reservation is never written): round n
    of eight; from the second on, the restart first checks what the kill before left."""
    crashes.round(n)
    assert crashes.done == n


def test_after_eight_kill_9s_the_database_stays_sound_and_the_books_know_every_acknowledged_call(
    crashes: Crashes,
) -> None:
    crashes.round(KILLS)
    data, acked, upstream = crashes.data, crashes.acked, crashes.upstream
    with running_appliance(data, env=crashes.ENV, start_timeout=30) as app:
        assert httpx.get(app.base_url + "/readyz", timeout=10).status_code == 200
        assert_nothing_acknowledged_lost(app, acked)
    ((charges,),) = query(data, "SELECT count(*) FROM ledger_entries WHERE kind = 'charge'")
    assert charges >= sum(acked.values()) >= KILLS * 10
    # Nothing reached the upstream that the books do not know of, beyond the calls in flight
    # at each kill (at most one per worker).
    assert 0 <= upstream.count - charges <= KILLS * WORKERS
    print(
        f"CRASH-01: {KILLS} kills, {sum(acked.values())} acknowledged,"
        f" restarts {max(crashes.starts):.1f} s at most"
    )
