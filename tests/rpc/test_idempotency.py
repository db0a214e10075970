"""Idempotency keys on tools/call, the audit of refused calls, and /metrics behind a key.

The app served in process (tests/support/inprocess.py), real SDK clients, a real counting
upstream (tests/support/accounts.py).

Moved from tests/e2e/test_idempotency.py, which keeps, on a real ``toolspoke serve``, what
needs its process: a call cut off by kill -9 and replayed after a restart, and a client that
gives up mid-call by closing its connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from tests.support.accounts import (
    MeteredUpstream,
    add_agent_key,
    admin,
    as_key,
    credits_path,
    query,
    run,
    user_id,
)
from tests.support.clients import connect
from tests.support.idempotent import ENV, KEY, REPLAY, charges, keyed, raw_call, text, two_agents
from tests.support.inprocess import InProcess, served_in_process

pytestmark = pytest.mark.inprocess
METRICS_KEY = "scrape-" + "m" * 24


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    data = tmp_path_factory.mktemp("idem") / "data"
    env = {**ENV, "TOOLSPOKE_METRICS_KEY": METRICS_KEY}
    with served_in_process(data, env=env) as served:
        yield served


@pytest.fixture(scope="module")
def upstream() -> Iterator[MeteredUpstream]:
    up = MeteredUpstream()
    yield up
    up.close()


@pytest.fixture(scope="module")
def agents(app: InProcess, upstream: MeteredUpstream) -> tuple[str, str]:
    return two_agents(app, upstream)


def test_five_sequential_retries_with_one_key_make_one_upstream_call_and_one_charge_and_replay_the_result(
    app: InProcess, upstream: MeteredUpstream, agents: tuple[str, str]
) -> None:
    """LEDGER-05: sequential retries replay the stored result; one call, one charge; and
    (I-3) each retry still leaves its audit row: fee 0, reason idempotent_replay."""
    before_calls, before_charges = upstream.paths["/hit"], charges(app)
    before_rows = replay_rows(app)

    async def scenario() -> list[Any]:
        async with connect(as_key(app, agents[0]), mode="legacy") as client:
            return [await keyed(client, "idem__hit", "seq-1") for _ in range(6)]

    first, *retries = run(scenario())
    assert upstream.paths["/hit"] - before_calls == 1
    assert charges(app) - before_charges == 1
    assert not first.is_error and REPLAY not in (first.meta or {})
    for again in retries:
        assert text(again) == text(first)
        assert again.meta[REPLAY] is True
    assert admin(app, "GET", credits_path(app, "ivy")).json()["balance"] == 100 - charges(app)
    assert replay_rows(app)[len(before_rows) :] == [("idem", "idem__hit", None, "ok", 0)] * 5


def replay_rows(app: InProcess) -> list[tuple[Any, ...]]:
    """Audit rows of replayed retries, oldest first: toolkit, tool, runner, outcome, fee."""
    return [
        tuple(row)
        for row in query(
            app.data_dir,
            "SELECT toolkit, tool, runner, outcome, fee_milli FROM audit_log"
            " WHERE reason = 'idempotent_replay' ORDER BY id",
        )
    ]


def test_ten_concurrent_first_attempts_with_one_key_run_the_call_exactly_once(
    app: InProcess, upstream: MeteredUpstream, agents: tuple[str, str]
) -> None:
    """LEDGER-05: a concurrent duplicate is refused -32004 idempotency_in_progress or replays."""
    before_calls, before_charges = upstream.paths["/hit"], charges(app)

    async def scenario() -> list[Any]:
        async with connect(as_key(app, agents[0]), mode="legacy") as client:
            return await asyncio.gather(
                *(keyed(client, "idem__hit", "burst-1") for _ in range(10)), return_exceptions=True
            )

    results = run(scenario())
    assert upstream.paths["/hit"] - before_calls == 1
    assert charges(app) - before_charges == 1
    refused = [r for r in results if isinstance(r, MCPError)]
    answered = [r for r in results if not isinstance(r, BaseException)]
    assert len(refused) + len(answered) == 10
    assert {(e.code, e.data["reason"]) for e in refused} <= {(-32004, "idempotency_in_progress")}
    assert len({text(r) for r in answered}) == 1
    assert sum(1 for r in answered if REPLAY not in (r.meta or {})) == 1


def test_retries_while_the_first_call_is_still_running_are_refused_in_progress_and_then_replay(
    app: InProcess, upstream: MeteredUpstream, agents: tuple[str, str]
) -> None:
    """LEDGER-05: ten concurrent retries during a slow first call: never a second execution."""
    upstream.release.clear()
    upstream.arrived.clear()
    before = upstream.paths["/slow"]

    async def scenario() -> tuple[Any, list[Any], Any]:
        async with connect(as_key(app, agents[0]), mode="legacy") as client:
            first = asyncio.ensure_future(keyed(client, "idem__slow", "slow-1"))
            assert await asyncio.to_thread(upstream.arrived.wait, 30)
            during = await asyncio.gather(
                *(keyed(client, "idem__slow", "slow-1") for _ in range(10)), return_exceptions=True
            )
            upstream.release.set()
            done = await first
            after = await keyed(client, "idem__slow", "slow-1")
            return done, during, after

    try:
        done, during, after = run(scenario())
    finally:
        upstream.release.set()
    assert upstream.paths["/slow"] - before == 1
    assert all(isinstance(e, MCPError) and e.code == -32004 for e in during)
    assert {e.data["reason"] for e in during} == {"idempotency_in_progress"}
    assert text(after) == text(done) and after.meta[REPLAY] is True
    rows = query(
        app.data_dir,
        "SELECT outcome, reason, count(*) FROM audit_log WHERE tool = 'idem__slow'"
        " GROUP BY 1, 2 ORDER BY 1, 2",
    )
    assert rows == [
        ("blocked", "idempotency_in_progress", 10),
        ("ok", None, 1),
        ("ok", "idempotent_replay", 1),
    ]


def test_an_iserror_result_is_stored_and_replayed_without_calling_again(
    app: InProcess, upstream: MeteredUpstream, agents: tuple[str, str]
) -> None:
    """LEDGER-05: the first result is replayed even when it is an upstream failure."""
    before = upstream.paths["/status/500"]

    async def scenario() -> list[Any]:
        async with connect(as_key(app, agents[0]), mode="legacy") as client:
            return [await keyed(client, "idem__fail", "fail-1") for _ in range(3)]

    first, *retries = run(scenario())
    assert upstream.paths["/status/500"] - before == 1
    assert first.is_error
    assert all(r.is_error and text(r) == text(first) and r.meta[REPLAY] for r in retries)


def test_a_key_reused_for_different_arguments_is_refused_and_nothing_is_called(
    app: InProcess, upstream: MeteredUpstream, agents: tuple[str, str]
) -> None:
    """LEDGER-05: different parameters → -32004 idempotency_key_reused, no call."""

    async def scenario() -> MCPError:
        async with connect(as_key(app, agents[0]), mode="legacy") as client:
            await keyed(client, "idem__need", "need-1", {"q": "one"})
            with pytest.raises(MCPError) as refused:
                await keyed(client, "idem__need", "need-1", {"q": "two"})
            return refused.value

    refused = run(scenario())
    assert (refused.code, refused.data["reason"]) == (-32004, "idempotency_key_reused")
    assert refused.data["field"] == f"_meta.{KEY}"
    assert upstream.paths["/need"] == 1
    assert query(
        app.data_dir, "SELECT outcome, reason FROM audit_log WHERE tool = 'idem__need' ORDER BY id"
    ) == [("ok", None), ("invalid", "idempotency_key_reused")]


def test_another_agent_using_the_same_key_runs_its_own_call_and_never_sees_the_first_result(
    app: InProcess, upstream: MeteredUpstream, agents: tuple[str, str]
) -> None:
    """LEDGER-05: keys are scoped per agent."""
    before = upstream.paths["/hit"]

    async def call(key: str) -> Any:
        async with connect(as_key(app, key), mode="legacy") as client:
            return await keyed(client, "idem__hit", "shared-1")

    mine = run(call(agents[0]))
    theirs = run(call(agents[1]))
    assert upstream.paths["/hit"] - before == 2
    assert text(mine) != text(theirs)  # each answer carries the upstream's request number
    assert REPLAY not in (theirs.meta or {})


def test_bridge_runners_and_a_toolkits_own_endpoint_honour_the_key_too(
    app: InProcess, upstream: MeteredUpstream, agents: tuple[str, str]
) -> None:
    """LEDGER-05 on every face: use_tool through /mcp, and the tool's own name on /mcp/<slug>;
    replays are audited under the underlying tool and its toolkit, the runner beside it."""
    before = upstream.paths["/hit"]
    before_rows = replay_rows(app)

    async def scenario() -> list[Any]:
        out = []
        async with connect(as_key(app, agents[1]), mode="legacy") as client:
            for _ in range(3):
                out.append(await keyed(client, "use_tool", "runner-1", {"tool": "idem__hit", "input": {}}))
        async with connect(as_key(app, agents[1]), "/mcp/idem", mode="legacy") as client:
            for _ in range(3):
                out.append(await keyed(client, "hit", "own-1"))
        return out

    results = run(scenario())
    assert upstream.paths["/hit"] - before == 2
    assert [REPLAY in (r.meta or {}) for r in results] == [False, True, True, False, True, True]
    runner_row, own_row = ("idem", "idem__hit", "use_tool", "ok", 0), ("idem", "idem__hit", None, "ok", 0)
    assert replay_rows(app)[len(before_rows) :] == [runner_row] * 2 + [own_row] * 2


def test_a_malformed_key_is_refused_naming_the_field_and_audited(
    app: InProcess, upstream: MeteredUpstream, agents: tuple[str, str]
) -> None:
    async def scenario() -> MCPError:
        async with connect(as_key(app, agents[1]), mode="legacy") as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("idem__hit", {}, meta={KEY: "x" * 300})
            return refused.value

    before = upstream.paths["/hit"]
    refused = run(scenario())
    assert refused.code == -32602 and refused.data["field"] == f"_meta.{KEY}"
    assert upstream.paths["/hit"] == before


@pytest.mark.parametrize(
    ("path", "params", "tool", "reason"),
    [
        ("/mcp", {"name": "idem__hit", "arguments": [1]}, "idem__hit", "invalid_params"),
        ("/mcp", {"name": 5, "arguments": {}}, "5", "invalid_params"),
        ("/mcp/idem", {"name": "nosuch", "arguments": {}}, "nosuch", "tool_not_found"),
        ("/mcp", {"name": "use_tool", "arguments": {"input": {}}}, "use_tool", "arguments_invalid"),
    ],
    ids=["arguments not an object", "name not a string", "unknown name on /mcp/slug", "runner without tool"],
)
def test_a_refused_tools_call_from_an_authenticated_caller_still_leaves_one_invalid_audit_row(
    app: InProcess, agents: tuple[str, str], path: str, params: dict[str, Any], tool: str, reason: str
) -> None:
    key = add_agent_key(app.data_dir, user_id(app.data_dir, "ivy"), _agent_of(app, agents[1]))
    answer = raw_call(app, key, path, params)
    if "error" in answer:
        assert answer["error"]["code"] == -32602, answer
        assert answer["error"]["data"]["reason"] == reason
    else:  # 2025-11-25 on: bad input is an isError result the model can act on
        assert answer["result"]["isError"] and answer["result"]["_meta"]["toolspoke/reason"] == reason
    sql = "SELECT tool, outcome, reason FROM audit_log WHERE key_prefix = ?"
    rows = query(app.data_dir, sql, (key[:12],))
    assert rows == [(tool, "invalid", reason)]


def _agent_of(app: InProcess, key: str) -> int:
    ((agent,),) = query(app.data_dir, "SELECT agent_id FROM api_keys WHERE prefix = ?", (key[:12],))
    return int(agent)


def test_metrics_need_the_metrics_key_or_an_admin_key_once_one_is_set(
    app: InProcess, agents: tuple[str, str]
) -> None:
    def scrape(token: str | None) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return app.request("GET", "/metrics", headers=headers, timeout=30).status_code

    assert scrape(None) == 401
    assert scrape("scrape-wrong-key-but-long-enough") == 401
    assert scrape(agents[0]) == 403  # a valid key, but no admin
    assert scrape(METRICS_KEY) == 200
    assert scrape(app.key) == 200
    assert app.request("GET", "/healthz", timeout=10).status_code == 200  # probes stay open
