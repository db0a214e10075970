"""The ledger's admin routes (web/admin_ledger.py: prices, credit, call history) and the
calls they account for, in process (tests/support/inprocess.py), with real SDK clients and
a real metered upstream. Users, agents and keys are written into its database in one go
(tests/support/accounts.py).

Moved from tests/e2e/test_spend.py, which keeps, on a real ``toolspoke serve``, what needs
its process: hundreds of concurrent calls against a ceiling, a rate limit paced over the
real clock, quota windows under the server's own time zone, and the CLI as a process.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from tests.support.accounts import (
    MeteredUpstream,
    add_user_keys,
    admin,
    as_key,
    burst,
    credits_path,
    fund_callers,
    install,
    open_db,
    query,
    run,
    user_id,
)
from tests.support.clients import connect
from tests.support.inprocess import InProcess, served_in_process

pytestmark = pytest.mark.inprocess
AGENTS = 30


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    data = tmp_path_factory.mktemp("ledger") / "data"
    env = {
        "TOOLSPOKE_RATE_LIMIT_WINDOW_S": "3600",
        "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
        "TOOLSPOKE_IMPORTS_PER_HOUR": "1000",
        "TOOLSPOKE_UPSTREAM_TIMEOUT_S": "2",
    }
    with served_in_process(data, env=env) as served:
        yield served


@pytest.fixture(scope="module")
def keys(app: InProcess) -> dict[str, list[str]]:
    return fund_callers(app, AGENTS)


def test_a_caller_without_credit_gets_32002_and_nothing_reaches_the_upstream(app: InProcess) -> None:
    """LEDGER-02: an exhausted credit blocks the call and the charge."""
    (broke,) = add_user_keys(app.data_dir, "dee", 1)
    upstream = MeteredUpstream()
    try:
        tool = install(app, "pricey", upstream, fee=5)
        (result,) = burst(app, [(broke, 1)], tool)
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
    app: InProcess, keys: dict[str, list[str]]
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    upstream = MeteredUpstream()
    try:
        tool = install(app, "gauged", upstream, daily_limit=1)
        burst(app, [(keys["cyd"][0], 2)], tool)
    finally:
        upstream.close()
    r = app.request("GET", "/metrics", timeout=30)
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
    app: InProcess,
) -> None:
    assert app.request("GET", "/healthz", timeout=10).json() == {"status": "alive"}
    ready = app.request("GET", "/readyz", timeout=10)
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
    app: InProcess, body: str, field: str
) -> None:
    """LEDGER-09: hostile numbers as raw JSON tokens through the owner API."""
    before = admin(app, "GET", "/toolkits/demo/quota").json()
    r = app.request(
        "PUT",
        "/api/v1/toolkits/demo/quota",
        content=body,
        headers={"Authorization": f"Bearer {app.key}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field
    assert admin(app, "GET", "/toolkits/demo/quota").json() == before


def test_call_history_pages_by_cursor_newest_first_and_filters_by_outcome(
    app: InProcess, keys: dict[str, list[str]]
) -> None:
    upstream = MeteredUpstream()
    try:
        tool = install(app, "paged", upstream, daily_limit=3)
        burst(app, [(keys["ann"][1], 5)], tool)
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
    mine = app.request(
        "GET",
        f"/api/v1/users/{user_id(app.data_dir, 'ann')}/calls?limit=500",
        headers={"Authorization": f"Bearer {keys['ann'][1]}"},
        timeout=30,
    )
    assert mine.status_code == 200 and all(c["user"] == "ann" for c in mine.json()["calls"])
    theirs = app.request(
        "GET",
        "/api/v1/toolsets/paged/calls",
        headers={"Authorization": f"Bearer {keys['ann'][1]}"},
        timeout=30,
    )
    assert theirs.status_code == 404  # not the owner: the toolkit is as good as absent


def test_credit_grants_and_voids_are_new_entries_and_the_balance_is_their_sum(app: InProcess) -> None:
    (key,) = add_user_keys(app.data_dir, "fay", 1)
    assert admin(app, "POST", credits_path(app, "fay"), {"amount": 2.5}).json()["balance"] == 2.5
    upstream = MeteredUpstream()
    try:
        tool = install(app, "billed", upstream, fee=1.5)
        (result,) = burst(app, [(key, 1)], tool)
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
    app: InProcess, keys: dict[str, list[str]], action: str, arguments: dict[str, Any], outcome: str,
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
    app: InProcess, keys: dict[str, list[str]]
) -> None:
    """LEDGER-06, SSRF-01: SSRF-blocked calls are voided and audited `blocked`."""
    upstream = MeteredUpstream()
    install(app, "guarded", upstream)
    upstream.close()
    # An import refuses such a URL; a stored row edited behind its back must still be stopped
    # at call time (RELIABILITY SSRF-01): loopback, but not in ALLOWED_TOOL_CIDRS.
    with closing(open_db(app.data_dir)) as db, db:
        db.execute("UPDATE toolkits SET base_url = 'http://127.0.0.2:9' WHERE slug = 'guarded'")
        db.execute(
            "UPDATE tools SET binding = json_remove(binding, '$.base_url') WHERE toolkit_id ="
            " (SELECT id FROM toolkits WHERE slug = 'guarded')"
        )
    before = admin(app, "GET", credits_path(app, "cyd")).json()["balance"]
    (result,) = burst(app, [(keys["cyd"][4], 1)], "guarded__hit")
    assert result.is_error
    assert query(
        app.data_dir, "SELECT outcome, reason, fee_milli FROM audit_log WHERE toolkit = 'guarded'"
    ) == [("blocked", "ssrf_blocked", 0)]
    assert admin(app, "GET", credits_path(app, "cyd")).json()["balance"] == before


def test_a_call_sent_to_the_wrong_runner_is_invalid_uncharged_and_audited_under_the_tool_not_the_runner(
    app: InProcess, keys: dict[str, list[str]]
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
    app: InProcess, method: str, path: str, body: str | None, status: int
) -> None:
    """LEDGER-09: ids beyond 64 bits and bad text are refused, never a 500."""
    r = app.request(
        method,
        "/api/v1" + path,
        content=body,
        headers={"Authorization": f"Bearer {app.key}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == status, r.text
    assert set(r.json()["error"]) >= {"reason", "message"}
    assert "Traceback" not in r.text
