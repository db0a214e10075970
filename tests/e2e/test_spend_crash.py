"""kill -9 during a load of paid calls, then restart: nothing acknowledged is lost (CRASH-01).

The load uses raw stateless (2026-07-28) requests over httpx rather than the SDK client:
each request stands alone, so a worker learns at once that the server died (connection
refused) instead of waiting out a session, and an HTTP 200 with a result is exactly what
"acknowledged" means here.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.accounts import (
    MeteredUpstream,
    add_user_keys,
    admin,
    credits_path,
    install,
    query,
)
from tests.support.clients import modern_tools_call
from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e
WORKERS = 20


async def _worker(app: Appliance, key: str, tool: str, acked: Counter[str], kill_at: int) -> None:
    headers, body = modern_tools_call(key, tool)
    async with httpx.AsyncClient(base_url=app.base_url, headers=headers, timeout=30) as http:
        while True:
            try:
                r = await http.post("/mcp", json=body)
            except httpx.TransportError:
                return  # the server is gone
            if r.status_code == 200 and "result" in r.json() and not r.json()["result"]["isError"]:
                acked[key[:12]] += 1
                if sum(acked.values()) == kill_at:
                    app.proc.kill()  # SIGKILL, wherever the server is


def load_until_killed(app: Appliance, keys: list[str], tool: str, kill_at: int, acked: Counter[str]) -> None:
    async def everyone() -> None:
        await asyncio.gather(
            *(_worker(app, keys[i % len(keys)], tool, acked, kill_at) for i in range(WORKERS))
        )

    asyncio.run(asyncio.wait_for(everyone(), timeout=120))
    assert app.proc.wait(timeout=10) == -9


def test_kill_9_during_load_loses_no_acknowledged_charge_or_audit_row_and_the_database_stays_sound(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    env = {
        "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
        "TOOLSPOKE_IMPORTS_PER_HOUR": "1000",
        "TOOLSPOKE_RATE_LIMIT": "100000",
    }
    upstream = MeteredUpstream()
    seeded = random.Random(6)
    acked: Counter[str] = Counter()
    try:
        with running_appliance(data, env=env) as app:
            keys = add_user_keys(data, "load", 10)
            assert admin(app, "POST", credits_path(app, "load"), {"amount": 100000}).status_code == 201
            tool = install(app, "meter", upstream, fee=1)
            load_until_killed(app, keys, tool, seeded.randint(50, 250), acked)
        first = sum(acked.values())
        with running_appliance(data, env=env) as app:
            load_until_killed(app, keys, tool, first + seeded.randint(50, 250), acked)
        with running_appliance(data, env=env) as app:
            ready = httpx.get(app.base_url + "/readyz", timeout=10)
            assert ready.status_code == 200
    finally:
        upstream.close()
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
        assert charged.get(prefix, 0) >= n
    # Every charge has its audit row and the other way round; the sums agree.
    assert query(
        data,
        "SELECT count(*) FROM ledger_entries e WHERE kind = 'charge'"
        " AND NOT EXISTS (SELECT 1 FROM audit_log a WHERE a.id = e.audit_id)",
    ) == [(0,)]
    assert query(
        data,
        "SELECT (SELECT count(*) FROM audit_log WHERE fee_milli > 0),"
        " (SELECT count(*) FROM ledger_entries WHERE kind = 'charge'),"
        " (SELECT sum(fee_milli) FROM audit_log), (SELECT -sum(amount_milli) FROM ledger_entries"
        " WHERE kind = 'charge')",
    ) == [
        (
            sum(charged.values()),
            sum(charged.values()),
            sum(charged.values()) * 1000,
            sum(charged.values()) * 1000,
        )
    ]
    # Nothing reached the upstream that the books do not know of, beyond the calls in flight
    # at each kill (at most one per worker).
    assert 0 <= upstream.count - sum(charged.values()) <= 2 * WORKERS
