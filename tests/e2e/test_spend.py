"""Spend and accounting end to end: real appliance, real SDK clients, a real metered upstream.

The appliance runs with its clock's zone at UTC+14 (POSIX ``TZ``): quota windows must still
be UTC. Users, agents and keys are written into its database in one go (tests/support/accounts.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.support.accounts import (
    MeteredUpstream,
    add_agent_key,
    add_user_keys,
    admin,
    credits_path,
    install,
    query,
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
    made = {}
    for user in ("ann", "bob", "cyd"):
        made[user] = add_user_keys(app.data_dir, user, AGENTS // 3, agents=True)
        r = admin(app, "POST", credits_path(app, user), {"amount": 1000, "note": "test"})
        assert r.status_code == 201, r.text
    return made


def run(coro: Any, timeout: float = 120) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=timeout))


def as_key(app: Appliance, key: str) -> Appliance:
    return dataclasses.replace(app, key=key)


async def _calls(app: Appliance, key: str, tool: str, n: int) -> list[Any]:
    """``n`` concurrent direct calls on one SDK session; each result or the MCPError raised."""
    async with connect(as_key(app, key)) as client:
        return await asyncio.gather(*(client.call_tool(tool, {}) for _ in range(n)), return_exceptions=True)


def _burst(app: Appliance, callers: list[tuple[str, int]], tool: str) -> list[Any]:
    async def scenario() -> list[Any]:
        groups = await asyncio.gather(*(_calls(app, key, tool, n) for key, n in callers))
        return [r for g in groups for r in g]

    return run(scenario())


def _all_keys(keys: dict[str, list[str]]) -> list[str]:
    return [k for ks in keys.values() for k in ks]


def _quota_errors(results: list[Any]) -> list[MCPError]:
    return [r for r in results if isinstance(r, MCPError) and r.code == -32002]


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
        results = _burst(app, [(k, 10) for k in _all_keys(keys)], tool)
    finally:
        upstream.close()
    refused = _quota_errors(results)
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
        results = _burst(app, [(k, 10) for k in _all_keys(keys)] + owner, tool)
    finally:
        upstream.close()
    assert upstream.count == 100 + 20
    assert upstream.failed == 24
    assert len(_quota_errors(results)) == 200
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


def test_a_caller_without_credit_gets_32002_and_nothing_reaches_the_upstream(app: Appliance) -> None:
    """LEDGER-02: an exhausted credit blocks the call and the charge."""
    (broke,) = add_user_keys(app.data_dir, "dee", 1)
    upstream = MeteredUpstream()
    try:
        tool = install(app, "pricey", upstream, fee=5)
        (result,) = _burst(app, [(broke, 1)], tool)
    finally:
        upstream.close()
    assert isinstance(result, MCPError) and result.code == -32002
    assert result.data["window"] == "credit"
    assert result.data["fee"] == 5
    assert upstream.count == 0
    assert query(app.data_dir, "SELECT outcome, fee_milli FROM audit_log WHERE toolkit = 'pricey'") == [
        ("quota", 0)
    ]


def test_metrics_parse_with_the_prometheus_parser_and_count_calls_by_outcome(
    app: Appliance, keys: dict[str, list[str]]
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    upstream = MeteredUpstream()
    try:
        tool = install(app, "gauged", upstream, daily_limit=1)
        _burst(app, [(keys["cyd"][0], 2)], tool)
    finally:
        upstream.close()
    r = httpx.get(app.base_url + "/metrics", timeout=30)
    assert r.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    outcomes = {
        s.labels["outcome"]: s.value
        for s in families["toolspoke_tool_calls"].samples
        if s.name.endswith("_total") and s.labels["toolkit"] == "gauged"
    }
    assert outcomes == {"ok": 1.0, "quota": 1.0}
    used = {
        s.labels["window"]: s.value
        for s in families["toolspoke_quota_used"].samples
        if s.labels["toolkit"] == "gauged"
    }
    assert used["daily"] == 1.0
    assert any(s.labels.get("toolkit") == "gauged" for s in families["toolspoke_tool_call_seconds"].samples)
    assert "process_resident_memory_bytes" in families
    assert {"toolspoke_upstream_seconds", "toolspoke_search_seconds", "toolspoke_toolkit_health"} <= set(
        families
    )


def test_healthz_says_alive_and_readyz_says_ready_once_the_database_is_writable_and_migrated(
    app: Appliance,
) -> None:
    assert httpx.get(app.base_url + "/healthz", timeout=10).json() == {"status": "alive"}
    ready = httpx.get(app.base_url + "/readyz", timeout=10)
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"fee": NaN}', "fee"),
        ('{"fee": Infinity}', "fee"),
        ('{"fee": -Infinity}', "fee"),
        ('{"daily_limit": NaN}', "daily_limit"),
        ('{"monthly_limit": Infinity}', "monthly_limit"),
        ('{"fee": -1}', "fee"),
        ('{"fee": null}', "fee"),
        ('{"fee": 9223372036854775808}', "fee"),
        ('{"fee": 1000000000000000000000000000000}', "fee"),
        ('{"daily_limit": -1}', "daily_limit"),
        ('{"daily_limit": true}', "daily_limit"),
        ('{"fee": 1e-30}', "fee"),
        ('{"fee": 1e309}', "fee"),
        ('{"fee": "10"}', "fee"),
        ('{"fee": true}', "fee"),
        ('{"daily_limit": 9223372036854775808}', "daily_limit"),
        ('{"daily_limit": 1.5}', "daily_limit"),
        ('{"monthly_limit": []}', "monthly_limit"),
        ('{"unit": "euros"}', "unit"),
        ('{"colour": 1}', "colour"),
    ],
)
def test_a_hostile_price_is_refused_naming_the_field_and_nothing_is_stored(
    app: Appliance, body: str, field: str
) -> None:
    """LEDGER-09: hostile numbers as raw JSON tokens through the owner API."""
    before = admin(app, "GET", "/toolkits/demo/quota").json()
    r = httpx.put(
        app.base_url + "/api/v1/toolkits/demo/quota",
        content=body,
        headers={"Authorization": f"Bearer {app.key}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field
    assert admin(app, "GET", "/toolkits/demo/quota").json() == before


def test_call_history_pages_by_cursor_newest_first_and_filters_by_outcome(
    app: Appliance, keys: dict[str, list[str]]
) -> None:
    upstream = MeteredUpstream()
    try:
        tool = install(app, "paged", upstream, daily_limit=3)
        _burst(app, [(keys["ann"][1], 5)], tool)
    finally:
        upstream.close()
    seen, cursor = [], None
    while True:
        page = admin(
            app, "GET", "/toolsets/paged/calls?limit=2" + (f"&cursor={cursor}" if cursor else "")
        ).json()
        seen += page["calls"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == 5
    assert [c["id"] for c in seen] == sorted((c["id"] for c in seen), reverse=True)
    assert {c["tool"] for c in seen} == {"paged__hit"}
    assert all(c["key_prefix"] == keys["ann"][1][:12] and c["user"] == "ann" for c in seen)
    quota = admin(app, "GET", "/toolsets/paged/calls?outcome=quota").json()["calls"]
    assert len(quota) == 2 and all(c["fee"] == 0 for c in quota)
    ok = admin(app, "GET", "/toolsets/paged/calls?outcome=ok").json()["calls"]
    assert len(ok) == 3 and all(c["fee"] == 1 for c in ok)
    bad = admin(app, "GET", "/toolsets/paged/calls?cursor=zzz")
    assert (bad.status_code, bad.json()["error"]["field"]) == (422, "cursor")
    mine = httpx.get(
        app.base_url + f"/api/v1/users/{user_id(app.data_dir, 'ann')}/calls?limit=500",
        headers={"Authorization": f"Bearer {keys['ann'][1]}"},
        timeout=30,
    )
    assert mine.status_code == 200 and all(c["user"] == "ann" for c in mine.json()["calls"])
    theirs = httpx.get(
        app.base_url + "/api/v1/toolsets/paged/calls",
        headers={"Authorization": f"Bearer {keys['ann'][1]}"},
        timeout=30,
    )
    assert theirs.status_code == 404  # not the owner: the toolkit is as good as absent


def test_credit_grants_and_voids_are_new_entries_and_the_balance_is_their_sum(app: Appliance) -> None:
    (key,) = add_user_keys(app.data_dir, "fay", 1)
    assert admin(app, "POST", credits_path(app, "fay"), {"amount": 2.5}).json()["balance"] == 2.5
    upstream = MeteredUpstream()
    try:
        tool = install(app, "billed", upstream, fee=1.5)
        (result,) = _burst(app, [(key, 1)], tool)
    finally:
        upstream.close()
    assert not result.is_error
    account = admin(app, "GET", credits_path(app, "fay")).json()
    assert account["balance"] == 1
    charge = next(e for e in account["entries"] if e["kind"] == "charge")
    assert charge["amount"] == -1.5
    assert admin(app, "POST", f"/ledger/{charge['id']}/void", {"note": "refund"}).status_code == 201
    again = admin(app, "POST", f"/ledger/{charge['id']}/void", {})
    assert again.status_code == 409
    assert admin(app, "GET", credits_path(app, "fay")).json()["balance"] == 2.5
    too_much = admin(app, "POST", credits_path(app, "fay"), {"amount": -3})
    assert (too_much.status_code, too_much.json()["error"]["field"]) == (422, "amount")
    kinds = query(
        app.data_dir,
        "SELECT kind FROM ledger_entries WHERE user_id = (SELECT id FROM users WHERE name = 'fay')"
        " ORDER BY id",
    )
    assert [k for (k,) in kinds] == ["grant", "charge", "void"]


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
        (first,) = _burst(app, [(key, 1)], "clied__nothing")
        assert isinstance(first, MCPError) and first.code == -32602
        results = _burst(app, [(key, 3)], tool)
    finally:
        upstream.close()
    assert upstream.count == 2
    assert [r.data["window"] for r in _quota_errors(results)] == ["daily"]
    history = cli(app.data_dir, "calls", "--toolkit", "clied", "--json")
    assert history.returncode == 0, history.stderr
    calls = json.loads(history.stdout)["calls"]
    assert sorted(c["outcome"] for c in calls) == ["ok", "ok", "quota"]
    shown = cli(app.data_dir, "credits", "show", "gus", "--json")
    assert json.loads(shown.stdout)["balance"] == 0


@pytest.mark.parametrize(
    ("action", "arguments", "outcome", "reason", "charged", "reached"),
    [
        ("hit", {}, "ok", None, True, True),
        ("fail", {}, "is_error", "upstream_http_error", True, True),  # a 5xx answer: the upstream acted
        ("missing", {}, "is_error", "upstream_http_error", True, True),
        ("big", {}, "upstream_error", "upstream_too_large", True, True),
        ("slow", {}, "upstream_error", "upstream_timeout", True, True),
        ("need", {}, "invalid", "arguments_invalid", False, False),
        ("need", {"q": 5}, "invalid", "arguments_invalid", False, False),
    ],
    ids=["2xx", "5xx", "4xx", "too large", "timeout", "missing argument", "wrong type"],
)
def test_each_call_outcome_is_charged_only_when_the_upstream_was_reached_and_audited_once(
    app: Appliance, keys: dict[str, list[str]], action: str, arguments: dict[str, Any], outcome: str,
    reason: str | None, charged: bool, reached: bool,
) -> None:  # fmt: skip
    """LEDGER-06: one policy for 2xx, 4xx, 5xx, too large, timeout, bad input."""
    key = keys["cyd"][3]
    upstream = MeteredUpstream()
    slug = f"out-{action}-{len(str(arguments))}"
    try:
        install(app, slug, upstream)
        before = admin(app, "GET", credits_path(app, "cyd")).json()["balance"]

        async def call() -> Any:
            async with connect(as_key(app, key), mode="legacy") as client:  # 2025-11-25: isError results
                return await client.call_tool(f"{slug}__{action}", arguments)

        result = run(call())
    finally:
        upstream.close()
    assert upstream.count == int(reached)
    assert result.is_error == (outcome != "ok")
    rows = query(
        app.data_dir, "SELECT outcome, reason, fee_milli, tool FROM audit_log WHERE toolkit = ?", (slug,)
    )
    assert rows == [(outcome, reason, 1000 if charged else 0, f"{slug}__{action}")]
    after = admin(app, "GET", credits_path(app, "cyd")).json()["balance"]
    assert before - after == (1 if charged else 0)


def test_a_call_the_egress_guard_blocks_is_audited_as_blocked_and_costs_nothing(
    app: Appliance, keys: dict[str, list[str]]
) -> None:
    """LEDGER-06, SSRF-01: SSRF-blocked calls are voided and audited `blocked`."""
    upstream = MeteredUpstream()
    install(app, "guarded", upstream)
    upstream.close()
    # An import refuses such a URL; a stored row edited behind its back must still be stopped
    # at call time (RELIABILITY SSRF-01): loopback, but not in ALLOWED_TOOL_CIDRS.
    with closing(sqlite3.connect(app.data_dir / "toolspoke.db")) as db, db:
        db.execute("UPDATE toolkits SET base_url = 'http://127.0.0.2:9' WHERE slug = 'guarded'")
        db.execute(
            "UPDATE tools SET binding = json_remove(binding, '$.base_url') WHERE toolkit_id ="
            " (SELECT id FROM toolkits WHERE slug = 'guarded')"
        )
    before = admin(app, "GET", credits_path(app, "cyd")).json()["balance"]
    (result,) = _burst(app, [(keys["cyd"][4], 1)], "guarded__hit")
    assert result.is_error
    assert query(
        app.data_dir, "SELECT outcome, reason, fee_milli FROM audit_log WHERE toolkit = 'guarded'"
    ) == [("blocked", "ssrf_blocked", 0)]
    assert admin(app, "GET", credits_path(app, "cyd")).json()["balance"] == before


def test_a_call_sent_to_the_wrong_runner_is_invalid_uncharged_and_audited_under_the_tool_not_the_runner(
    app: Appliance, keys: dict[str, list[str]]
) -> None:
    upstream = MeteredUpstream()
    try:
        tool = install(app, "runners", upstream)

        async def call() -> Any:
            async with connect(as_key(app, keys["cyd"][5])) as client:
                wrong = await client.call_tool("run_tool", {"tool": tool, "input": {}})
                right = await client.call_tool("use_tool", {"tool": tool, "input": {}})
                return wrong, right

        wrong, right = run(call())
    finally:
        upstream.close()
    assert wrong.is_error and not right.is_error
    assert upstream.count == 1
    rows = query(
        app.data_dir,
        "SELECT tool, runner, outcome, fee_milli FROM audit_log WHERE toolkit = 'runners' ORDER BY id",
    )
    assert rows == [(tool, "run_tool", "invalid", 0), (tool, "use_tool", "ok", 1000)]


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
            first, second = _burst(app, [(key, 1), (key, 1)], tool)
            quota = admin(app, "GET", "/toolkits/west/quota").json()
    finally:
        upstream.close()
    refused = _quota_errors([first, second])
    assert len(refused) == 1 and upstream.count == 1
    # The next UTC midnight and first of the month (either side of a boundary the test may cross).
    moments = (started, datetime.now(UTC))
    assert refused[0].data["resets_at"] in {
        (m + timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z") for m in moments
    }
    assert quota["daily"]["resets_at"] == refused[0].data["resets_at"]
    firsts = {(m.replace(day=28) + timedelta(days=4)).strftime("%Y-%m-01T00:00:00Z") for m in moments}
    assert quota["monthly"]["resets_at"] in firsts


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/ledger/9223372036854775808/void", "{}", 404),
        ("POST", "/ledger/99999/void", "{}", 404),
        ("GET", "/agents/9223372036854775808/calls", None, 404),
        ("GET", "/users/9223372036854775808/credits", None, 404),
        ("POST", "/users/1/credits", '{"amount": 1, "note": "\\ud800"}', 422),
        ("POST", "/users/1/credits", '{"amount": 1, "note": 5}', 422),
        ("POST", "/users/1/credits", '{"note": "no amount"}', 422),
        ("GET", "/toolsets/demo/calls?since=nan", None, 422),
        ("GET", "/toolsets/demo/calls?until=2026-01-01T00:00:00", None, 422),
        ("GET", "/toolsets/demo/calls?limit=0", None, 422),
        ("GET", "/toolsets/demo/calls?outcome=maybe", None, 422),
        ("GET", "/toolsets/nosuch/calls", None, 404),
    ],
)
def test_hostile_ledger_requests_get_a_clear_error_and_never_a_server_error(
    app: Appliance, method: str, path: str, body: str | None, status: int
) -> None:
    """LEDGER-09: ids beyond 64 bits and bad text are refused, never a 500."""
    r = httpx.request(
        method,
        app.base_url + "/api/v1" + path,
        content=body,
        headers={"Authorization": f"Bearer {app.key}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == status, r.text
    assert set(r.json()["error"]) >= {"reason", "message"}
    assert "Traceback" not in r.text


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
        owner = _burst(app, [(own_key, 3)], tool)
        bot = _burst(app, [(agent_key, 2)], tool)
        # Kim on a toolkit she does not own (the platform's): metered like anyone.
        other = install(app, "not-kims", upstream)
        (elsewhere,) = _burst(app, [(own_key, 1)], other)
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
