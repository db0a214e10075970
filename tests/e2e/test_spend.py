"""Spend and accounting end to end: real appliance, real SDK clients, a real metered upstream.

The appliance runs with its clock's zone at UTC+14 (POSIX ``TZ``): quota windows must still
be UTC. Users, agents and keys are written into its database in one go (tests/support/accounts.py).
The ledger's admin routes and the outcome of single calls are tested in process
(tests/web/test_admin_ledger.py); here stays what needs a process of its own: concurrency
against a ceiling, pacing over the real clock, the server's time zone and the CLI.
"""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from tests.support.accounts import (
    MeteredUpstream,
    add_agent_key,
    add_user_keys,
    admin,
    as_key,
    burst,
    credits_path,
    fund_callers,
    install,
    query,
    quota_errors,
    run,
    user_id,
)
from tests.support.clients import connect
from tests.support.servers import Appliance, cli, running_appliance

pytestmark = pytest.mark.e2e
AGENTS = 30
BROWSE_LIMIT = 150


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    data = tmp_path_factory.mktemp("spend") / "data"
    env = {
        "TZ": "KIR-14",
        "TOOLSPOKE_RATE_LIMIT_WINDOW_S": "3600",
        "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
        "TOOLSPOKE_IMPORTS_PER_HOUR": "1000",
        "TOOLSPOKE_UPSTREAM_TIMEOUT_S": "2",
        "TOOLSPOKE_BROWSE_RATE_LIMIT": str(BROWSE_LIMIT),
    }
    with running_appliance(data, env=env) as running:
        yield running


@pytest.fixture(scope="module")
def keys(app: Appliance) -> dict[str, list[str]]:
    """Three users with ten agents each (thirty callers, a key each), 1000 credits each."""
    return fund_callers(app, AGENTS)


def _all_keys(keys: dict[str, list[str]]) -> list[str]:
    return [k for ks in keys.values() for k in ks]


def _check_books(data: Path, slug: str) -> None:
    """Ledger = audit fees, one charge per charged audit row, and no negative balance."""
    ((charged, audit_fees, charges, charged_rows),) = query(
        data,
        "SELECT (SELECT -coalesce(sum(amount_milli), 0) FROM ledger_entries WHERE kind = 'charge'"
        " AND toolkit_id = k.id),"
        " (SELECT coalesce(sum(fee_milli), 0) FROM audit_log WHERE toolkit_id = k.id),"
        " (SELECT count(*) FROM ledger_entries WHERE kind = 'charge' AND toolkit_id = k.id),"
        " (SELECT count(*) FROM audit_log a WHERE toolkit_id = k.id AND EXISTS"
        "   (SELECT 1 FROM ledger_entries e WHERE e.audit_id = a.id))"
        " FROM toolkits k WHERE slug = ?",
        (slug,),
    )
    assert charged == audit_fees
    assert charges == charged_rows
    assert (
        query(
            data,
            "SELECT user_id, sum(amount_milli) FROM ledger_entries GROUP BY 1 HAVING sum(amount_milli) < 0",
        )
        == []
    )


def test_300_concurrent_calls_from_30_agents_against_a_daily_ceiling_of_100_let_exactly_100_through(
    app: Appliance, keys: dict[str, list[str]]
) -> None:
    """LEDGER-01, LEDGER-02: no overspend under concurrency; the error names window, limit, resets_at."""
    upstream = MeteredUpstream()
    try:
        tool = install(app, "meter", upstream, daily_limit=100)
        results = burst(app, [(k, 10) for k in _all_keys(keys)], tool)
    finally:
        upstream.close()
    refused = quota_errors(results)
    assert upstream.count == 100
    assert len(refused) == 200
    assert sum(1 for r in results if not isinstance(r, BaseException) and not r.is_error) == 100
    data = refused[0].data
    assert data["reason"] == "quota_exhausted"
    assert (data["window"], data["limit"], data["used"]) == ("daily", 100, 100)
    now = datetime.now(UTC)
    midnight = {(now + timedelta(days=d)).strftime("%Y-%m-%dT00:00:00Z") for d in (1, 2)}
    assert data["resets_at"] in midnight  # the next UTC midnight, though the server runs at UTC+14
    assert query(
        app.data_dir,
        "SELECT count(*) FROM ledger_entries e JOIN toolkits k ON k.id = e.toolkit_id"
        " WHERE k.slug = 'meter' AND e.kind = 'charge'",
    ) == [(100,)]
    assert query(
        app.data_dir, "SELECT outcome, count(*) FROM audit_log WHERE toolkit = 'meter' GROUP BY 1 ORDER BY 1"
    ) == [("ok", 100), ("quota", 200)]
    # thirty agents, ten attempts each, every one audited under its agent
    assert query(
        app.data_dir,
        "SELECT count(DISTINCT agent_id), min(n), max(n) FROM (SELECT agent_id, count(*) AS n"
        " FROM audit_log WHERE toolkit = 'meter' GROUP BY agent_id)",
    ) == [(30, 10, 10)]
    _check_books(app.data_dir, "meter")


def test_with_a_fifth_of_upstream_calls_failing_and_owner_calls_mixed_in_still_only_100_are_charged(
    app: Appliance, keys: dict[str, list[str]]
) -> None:
    """LEDGER-01, LEDGER-06, LEDGER-08: failures charged once reached; owner calls free."""
    upstream = MeteredUpstream(fail_every=5)
    try:
        tool = install(app, "flaky", upstream, daily_limit=100, fee=2)
        owner = [(app.key, 2)] * 10  # the admin owns the platform's toolkits: free, uncounted
        results = burst(app, [(k, 10) for k in _all_keys(keys)] + owner, tool)
    finally:
        upstream.close()
    assert upstream.count == 100 + 20
    assert upstream.failed == 24
    assert len(quota_errors(results)) == 200
    rows = dict(
        query(
            app.data_dir,
            "SELECT owner_call, count(*) FROM audit_log WHERE toolkit = 'flaky'"
            " AND outcome IN ('ok', 'is_error') GROUP BY 1",
        )
    )
    assert rows == {0: 100, 1: 20}
    assert query(
        app.data_dir,
        "SELECT count(*), -sum(amount_milli) FROM ledger_entries e JOIN toolkits k"
        " ON k.id = e.toolkit_id WHERE k.slug = 'flaky' AND e.kind = 'charge'",
    ) == [(100, 200_000)]
    assert query(
        app.data_dir,
        "SELECT count(*) FROM audit_log WHERE toolkit = 'flaky' AND owner_call = 1 AND fee_milli != 0",
    ) == [(0,)]
    _check_books(app.data_dir, "flaky")


# Fees per kind (issue 20 item 5): the tool, its kind, the toolkit fee, in credits.
MIXED = {  # tool → (kind, fee in millicredits, arguments)
    "mixed__hit": ("read", 1000, {}),
    "mixed__need": ("write", 3000, {"q": "x"}),
    "mixed__missing": ("destructive", 7000, {}),
    "mixed__fail": ("read", 500, {}),  # its own fee, under the read kind's
}


def test_300_concurrent_calls_of_mixed_kinds_pay_each_its_own_fee_and_never_pass_a_credit_ceiling(
    app: Appliance, keys: dict[str, list[str]]
) -> None:
    """Issue 20 item 5 under LEDGER-01: thirty agents call read, write and destructive tools
    (and one tool with its own fee) at once against a daily ceiling of 300 credits. Every
    charge is exactly its tool's fee; Σ charges ≤ 300, and every refused call's fee would
    have passed the ceiling over the final total (reservations are never let go here: every
    admitted call reaches the upstream); the ledger equals the audit."""
    upstream = MeteredUpstream()
    limit = 300
    try:
        install(app, "mixed", upstream)
        for tool, (kind, _, _) in MIXED.items():
            r = admin(app, "POST", f"/tools/{tool}/kind", {"kind": kind})
            assert r.status_code == 200, r.text
        quota = {
            "fee": 1,
            "unit": "credits",
            "daily_limit": limit,
            "kind_fees": {"write": 3, "destructive": 7},
            "tool_fees": {"fail": 0.5},
        }
        r = admin(app, "PUT", "/toolkits/mixed/quota", quota)
        assert r.status_code == 200, r.text
        names = list(MIXED)

        async def caller(key: str, offset: int) -> list[tuple[str, Any]]:
            async with connect(as_key(app, key)) as client:
                picked = [names[(offset + i) % len(names)] for i in range(10)]
                done = await asyncio.gather(
                    *(client.call_tool(t, MIXED[t][2]) for t in picked), return_exceptions=True
                )
                return list(zip(picked, done, strict=True))

        async def scenario() -> list[tuple[str, Any]]:
            groups = await asyncio.gather(*(caller(k, i) for i, k in enumerate(_all_keys(keys))))
            return [pair for g in groups for pair in g]

        results = run(scenario())
    finally:
        upstream.close()
    charged = query(
        app.data_dir,
        "SELECT a.tool, count(*), min(-e.amount_milli), max(-e.amount_milli) FROM ledger_entries e"
        " JOIN audit_log a ON a.id = e.audit_id WHERE e.kind = 'charge' AND a.toolkit = 'mixed' GROUP BY 1",
    )
    total = 0
    for tool, count, low, high in charged:
        assert low == high == MIXED[tool][1], tool  # exactly its own fee, every time
        total += count * MIXED[tool][1]
    assert 0 < total <= limit * 1000
    refused = [t for t, r in results if isinstance(r, MCPError) and r.code == -32002]
    assert refused and sum(c for _, c, _, _ in charged) + len(refused) == 300
    assert all(total + MIXED[t][1] > limit * 1000 for t in refused)
    assert upstream.count == sum(c for _, c, _, _ in charged)
    _check_books(app.data_dir, "mixed")


def test_the_121st_call_within_the_limit_is_refused_with_retry_after_and_another_agent_is_unaffected(
    app: Appliance, keys: dict[str, list[str]]
) -> None:
    """RATE-01, RATE-03: the 121st call is -32001 with retry_after_s; another agent is served;
    the refusal is audited."""
    upstream = MeteredUpstream()
    (first,) = add_user_keys(app.data_dir, "eve", 1, agents=True)  # a fresh agent: a full bucket
    other = keys["bob"][0]

    took = 0.0

    async def scenario() -> tuple[list[Any], Any, Any]:
        nonlocal took
        async with connect(as_key(app, first)) as client:
            started = time.monotonic()
            done = [await client.call_tool(tool, {}) for _ in range(120)]
            with pytest.raises(MCPError) as refused:
                await client.call_tool(tool, {})
            took = time.monotonic() - started
            # search, list, describe and guide have their own (larger) limit
            browse = await client.call_tool("list_toolkits", {})
        async with connect(as_key(app, other)) as client:
            fine = await client.call_tool(tool, {})
        assert not browse.is_error
        return done, refused.value, fine

    try:
        tool = install(app, "paced", upstream, fee=0)
        done, refused, fine = run(scenario())
    finally:
        upstream.close()
    assert all(not r.is_error for r in done)
    assert refused.code == -32001
    assert refused.data["reason"] == "rate_limited"
    # 120 per 3600 s here: one call's worth is 30 s, counted from the first call of the burst
    assert 30 - took - 0.5 <= refused.data["retry_after_s"] <= 30
    assert refused.data["retry_after"] == math.ceil(refused.data["retry_after_s"])
    assert not fine.is_error
    assert upstream.count == 121
    prefix = first[:12]
    # The throttled attempt is filed under its toolkit (issue 16 item 11), like every other.
    assert query(
        app.data_dir,
        "SELECT toolkit, count(*) FROM audit_log WHERE key_prefix = ? AND outcome = 'rate_limited'"
        " GROUP BY 1",
        (prefix,),
    ) == [(tool.split("__")[0], 1)]


def test_the_cli_sets_prices_grants_credit_and_shows_history_that_the_serving_appliance_honours(
    app: Appliance,
) -> None:
    (key,) = add_user_keys(app.data_dir, "gus", 1)
    upstream = MeteredUpstream()
    try:
        tool = install(app, "clied", upstream)
        done = cli(app.data_dir, "quota", "set", "clied", "--fee", "0.25", "--daily", "2", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["fee"] == 0.25
        bad = cli(app.data_dir, "quota", "set", "clied", "--fee", "-Infinity")
        assert bad.returncode == 2 and "fee" in bad.stderr
        granted = cli(app.data_dir, "credits", "grant", "gus", "0.5", "--note", "welcome")
        assert granted.returncode == 0, granted.stderr
        # The server notices another process's commit in its next batch: this refused call's
        # audit row is one. The next call then sees the grant and the CLI's price.
        (first,) = burst(app, [(key, 1)], "clied__nothing")
        assert isinstance(first, MCPError) and first.code == -32602
        results = burst(app, [(key, 3)], tool)
    finally:
        upstream.close()
    assert upstream.count == 2
    assert [r.data["window"] for r in quota_errors(results)] == ["daily"]
    history = cli(app.data_dir, "calls", "--toolkit", "clied", "--json")
    assert history.returncode == 0, history.stderr
    calls = json.loads(history.stdout)["calls"]
    assert sorted(c["outcome"] for c in calls) == ["ok", "ok", "quota"]
    shown = cli(app.data_dir, "credits", "show", "gus", "--json")
    assert json.loads(shown.stdout)["balance"] == 0


def test_searches_have_their_own_limit_that_tool_calls_do_not_share(
    app: Appliance, keys: dict[str, list[str]]
) -> None:
    """RATE-05: search and list are limited separately from tool calls; the client's own
    ``server/discover`` and ``tools/list`` count in the same bucket."""
    (key,) = add_user_keys(app.data_dir, "hal", 1)
    upstream = MeteredUpstream()

    async def scenario() -> tuple[int, MCPError, MCPError]:
        async with connect(as_key(app, key)) as client:
            served = 0
            # The SDK's handshake took two: server/discover, and the tools/list it sends before
            # its first call to learn the tools' output schemas.
            for _ in range(BROWSE_LIMIT - 2):
                await client.call_tool("list_toolkits", {})
                served += 1
            with pytest.raises(MCPError) as refused:
                await client.call_tool("search_tools", {"query": "notes"})
            with pytest.raises(MCPError) as after:  # tool calls: a separate bucket (no credit here)
                await client.call_tool(tool, {})
            return served, refused.value, after.value

    try:
        tool = install(app, "browsed", upstream)
        served, refused, after = run(scenario())
    finally:
        upstream.close()
    assert served == BROWSE_LIMIT - 2
    assert (refused.code, refused.data["scope"]) == (-32001, "browse")
    assert refused.data["retry_after_s"] > 0
    assert after.code == -32002 and after.data["window"] == "credit"  # not -32001
    assert upstream.count == 0
    assert query(app.data_dir, "SELECT outcome FROM audit_log WHERE key_prefix = ?", (key[:12],)) == [
        ("quota",)
    ]


def test_a_server_at_utc_minus_0930_still_closes_its_quota_day_at_utc_midnight(tmp_path: Path) -> None:
    """LEDGER-02, RATE-04: the reset time is the next UTC midnight."""
    env = {"TZ": "MAR+9:30", "TOOLSPOKE_HEALTH_INTERVAL_S": "0", "TOOLSPOKE_IMPORTS_PER_HOUR": "1000"}
    upstream = MeteredUpstream()
    started = datetime.now(UTC)
    try:
        with running_appliance(tmp_path / "data", env=env) as app:
            (key,) = add_user_keys(app.data_dir, "ida", 1)
            assert admin(app, "POST", credits_path(app, "ida"), {"amount": 10}).status_code == 201
            tool = install(app, "west", upstream, daily_limit=1)
            first, second = burst(app, [(key, 1), (key, 1)], tool)
            quota = admin(app, "GET", "/toolkits/west/quota").json()
    finally:
        upstream.close()
    refused = quota_errors([first, second])
    assert len(refused) == 1 and upstream.count == 1
    # The next UTC midnight and first of the month (either side of a boundary the test may cross).
    moments = (started, datetime.now(UTC))
    assert refused[0].data["resets_at"] in {
        (m + timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z") for m in moments
    }
    assert quota["daily"]["resets_at"] == refused[0].data["resets_at"]
    firsts = {(m.replace(day=28) + timedelta(days=4)).strftime("%Y-%m-01T00:00:00Z") for m in moments}
    assert quota["monthly"]["resets_at"] in firsts


def test_an_owner_calls_their_toolkit_free_past_its_ceiling_but_their_agents_are_metered(
    app: Appliance,
) -> None:
    """LEDGER-08: owner calls free, audited with fee 0; their agents, and their own calls on
    another owner's toolkit, are metered."""
    (own_key,) = add_user_keys(app.data_dir, "kim", 1)
    with closing(sqlite3.connect(app.data_dir / "toolspoke.db")) as db, db:
        uid = user_id(app.data_dir, "kim")
        agent = db.execute(
            "INSERT INTO agents (user_id, name) VALUES (?, 'kim-bot') RETURNING id", (uid,)
        ).fetchone()[0]
    agent_key = add_agent_key(app.data_dir, uid, agent)
    upstream = MeteredUpstream()
    try:
        tool = install(app, "kims", upstream, daily_limit=1)
        assert admin(app, "PATCH", "/toolkits/kims/access", {"owner_id": uid}).status_code == 200
        assert admin(app, "POST", credits_path(app, "kim"), {"amount": 5}).status_code == 201
        owner = burst(app, [(own_key, 3)], tool)
        bot = burst(app, [(agent_key, 2)], tool)
        # Kim on a toolkit she does not own (the platform's): metered like anyone.
        other = install(app, "not-kims", upstream)
        (elsewhere,) = burst(app, [(own_key, 1)], other)
    finally:
        upstream.close()
    assert not elsewhere.is_error
    assert query(app.data_dir, "SELECT owner_call, fee_milli FROM audit_log WHERE toolkit = 'not-kims'") == [
        (0, 1000)
    ]
    assert all(not r.is_error for r in owner)  # past the ceiling of 1: owner calls are uncounted
    assert sum(1 for r in bot if isinstance(r, MCPError) and r.code == -32002) == 1
    assert upstream.count == 5
    assert admin(app, "GET", credits_path(app, "kim")).json()["balance"] == 3
    rows = query(
        app.data_dir,
        "SELECT owner_call, fee_milli, outcome FROM audit_log WHERE toolkit = 'kims' ORDER BY id",
    )
    assert sorted(rows) == sorted([(1, 0, "ok")] * 3 + [(0, 1000, "ok"), (0, 0, "quota")])
