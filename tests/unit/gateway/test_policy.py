"""The pipeline's policy stage (``gateway/policy.py``) on a real runtime and database.

The upstream is an OpenAPI toolkit answered in process (``Egress.serve_locally``) that
counts what reaches it: a read (GET), a write (POST) and a destructive (DELETE) tool. Each
refusal is checked where it matters: nothing reached the upstream, nothing was charged or
held, and the attempt left exactly one audit row with the refusal's reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from appliance import config
from appliance.access import policy as rules_room
from appliance.errors import CallRefused, Forbidden, InvalidParams, NotFound
from appliance.gateway import bridge, pipeline, policy
from appliance.gateway.admin import keys as key_ops
from appliance.gateway.admin import people
from appliance.gateway.admin import policy as policy_ops
from appliance.gateway.imports import import_openapi
from appliance.gateway.runtime import Runtime
from appliance.gateway.searching import search_tools
from appliance.ledger import store as ledger_store
from appliance.models import OPERATOR, Principal
from tests.support.runtimes import plain_user

ORIGIN = "http://kinds.toolspoke.invalid"
FEE = 1000
SPEC = {
    "openapi": "3.0.3",
    "info": {"title": "kinds", "version": "1"},
    "servers": [{"url": ORIGIN}],
    "paths": {
        "/notes": {
            "get": {"operationId": "list", "responses": {"200": {"description": "ok"}}},
            "post": {"operationId": "add", "responses": {"200": {"description": "ok"}}},
            "delete": {"operationId": "wipe", "responses": {"200": {"description": "ok"}}},
        },
    },
}
READ, WRITE, DESTROY = "kinds__list", "kinds__add", "kinds__wipe"
RUNNER = {READ: "use_tool", WRITE: "run_tool", DESTROY: "run_destructive_tool"}


@dataclass
class Upstream:
    hits: list[str] = field(default_factory=list)

    async def answer(self, method: str, target: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        self.hits.append(method)
        return 200, {"content-type": "application/json"}, b"{}"


@dataclass
class World:
    rt: Runtime
    upstream: Upstream
    payer: Principal

    async def rows(self) -> list[tuple[str, str, str | None, int]]:
        await self.rt.book.sync()
        async with self.rt.db.read() as conn:
            found = await conn.all("SELECT tool, outcome, reason, fee_milli FROM audit_log ORDER BY id")
        return [tuple(r) for r in found]

    async def balance(self) -> int:
        async with self.rt.db.read() as conn:
            return await conn.batch(lambda r: ledger_store.balance(r, self.payer.user_id))


@contextlib.asynccontextmanager
async def world(**env: str) -> AsyncIterator[World]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = config.load(
            env={"TOOLSPOKE_DATA_DIR": tmp, "TOOLSPOKE_DEMO": "0", "TOOLSPOKE_DEFAULT_FEE": "1", **env}
        )
        rt = Runtime(settings)
        await rt.open()
        try:
            upstream = Upstream()
            rt.egress.serve_locally(ORIGIN, upstream.answer)
            await import_openapi(rt, "kinds.json", slug="kinds", data=orjson.dumps(SPEC))
            async with rt.db.write() as tx:
                await tx.run(
                    "UPDATE toolkits SET visibility = 'published', is_default = 1 WHERE slug = 'kinds'"
                )
            payer = await plain_user(rt, "payer")
            await rt.book.admin(lambda r: ledger_store.insert_grant(r, 0.0, payer.user_id, 10 * FEE, "t", ""))
            yield World(rt, upstream, payer)
        finally:
            await rt.close()


async def deny_writes(rt: Runtime) -> None:
    await policy_ops.set_toolkit_policy(rt, OPERATOR, "kinds", "default", action="deny", kind="write")


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def test_the_tools_have_the_kinds_the_tests_rely_on() -> None:
    async def scenario() -> None:
        async with world() as w:
            found, _ = await search_tools(w.rt, "kinds", principal=w.payer, limit=10)
            assert {t.name: t.kind for t in found} == {READ: "read", WRITE: "write", DESTROY: "destructive"}

    run(scenario())


@pytest.mark.parametrize("guard", ["appliance", "principal"])
def test_read_only_runs_read_tools_and_refuses_the_rest_before_anything_is_sent_or_charged(
    guard: str,
) -> None:
    async def scenario() -> None:
        env = {"TOOLSPOKE_READ_ONLY": "1"} if guard == "appliance" else {}
        async with world(**env) as w:
            who = w.payer if guard == "appliance" else Principal(**{**vars_of(w.payer), "read_only": True})
            for name in (WRITE, DESTROY):
                with pytest.raises(CallRefused) as refused:
                    await pipeline.call_tool(w.rt, who, name, {})
                assert refused.value.reason == "read_only" and refused.value.rpc_code == -32006
                assert refused.value.data["rule"] == "read_only"
                assert ("the appliance is" in refused.value.public_message) == (guard == "appliance")
                # Through its runner: the same refusal as an isError result the model reads.
                result = await bridge.call_bridge(w.rt, who, RUNNER[name], {"tool": name})
                assert result.is_error and result.meta["reason"] == "read_only"
            assert w.upstream.hits == []
            assert all(t.held_milli == 0 for t in w.rt.book.balances.values())
            ok = await pipeline.call_tool(w.rt, who, READ, {})
            assert not ok.is_error and w.upstream.hits == ["GET"]
            assert await w.rows() == [
                (WRITE, "blocked", "read_only", 0),
                (WRITE, "blocked", "read_only", 0),
                (DESTROY, "blocked", "read_only", 0),
                (DESTROY, "blocked", "read_only", 0),
                (READ, "ok", None, FEE),
            ]
            assert await w.balance() == 9 * FEE

    run(scenario())


def vars_of(p: Principal) -> dict[str, Any]:
    return {f: getattr(p, f) for f in p.__dataclass_fields__}


@pytest.mark.parametrize(
    ("rules", "denied"),
    [
        ([("toolkit", None, "deny")], {READ, WRITE, DESTROY}),
        ([("kind", "destructive", "deny")], {DESTROY}),
        ([("tool", "add", "deny")], {WRITE}),
        # the most specific rule wins: tool over kind over toolkit
        ([("toolkit", None, "deny"), ("kind", "read", "allow")], {WRITE, DESTROY}),
        ([("toolkit", None, "deny"), ("tool", "wipe", "allow")], {READ, WRITE}),
        ([("kind", "write", "deny"), ("tool", "add", "allow")], set()),
        ([("kind", "write", "allow"), ("tool", "add", "deny")], {WRITE}),
        ([("toolkit", None, "allow")], set()),
    ],
)
def test_deny_rules_refuse_in_the_stage_and_search_leaves_out_exactly_those(
    rules: list[tuple[str, str | None, str]], denied: set[str]
) -> None:
    async def scenario() -> None:
        async with world() as w:
            version = (await policy_ops.toolkit_policy(w.rt, OPERATOR, "kinds", "default"))["version"]
            for level, what, action in rules:
                shown = await policy_ops.set_toolkit_policy(
                    w.rt,
                    OPERATOR,
                    "kinds",
                    "default",
                    action=action,
                    tool=what if level == "tool" else None,
                    kind=what if level == "kind" else None,
                )
                assert shown["version"] == version + 1  # every change moves the version
                version = shown["version"]
            found, _ = await search_tools(w.rt, "kinds", principal=w.payer, limit=10)
            assert {t.name for t in found} == {READ, WRITE, DESTROY} - denied
            for name in (READ, WRITE, DESTROY):
                if name in denied:
                    with pytest.raises(CallRefused) as refused:
                        await pipeline.call_tool(w.rt, w.payer, name, {})
                    assert refused.value.reason == "policy_denied"
                    assert refused.value.data["policy_version"] == version
                else:
                    await pipeline.call_tool(w.rt, w.payer, name, {})
            assert len(w.upstream.hits) == 3 - len(denied)
            assert await w.balance() == (10 - (3 - len(denied))) * FEE
            rows = await w.rows()
            assert {r[0] for r in rows if r[2] == "policy_denied"} == denied and len(rows) == 3

    run(scenario())


def test_a_deny_binds_the_owner_and_the_operator_too() -> None:
    async def scenario() -> None:
        async with world() as w:
            await policy_ops.set_toolkit_policy(w.rt, OPERATOR, "kinds", "default", action="deny")
            with pytest.raises(CallRefused):
                await pipeline.call_tool(w.rt, OPERATOR, READ, {})
            assert w.upstream.hits == []

    run(scenario())


def test_the_policy_operations_check_who_and_what() -> None:
    async def scenario() -> None:
        async with world() as w:
            set_rule = policy_ops.set_toolkit_policy
            with pytest.raises(NotFound):  # a plain user does not manage the platform's toolkit
                await set_rule(w.rt, w.payer, "kinds", "default", action="deny")
            with pytest.raises(InvalidParams) as bad:
                await set_rule(w.rt, OPERATOR, "kinds", "default", action="maybe")
            assert bad.value.field == "action"
            with pytest.raises(InvalidParams) as bad:
                await set_rule(w.rt, OPERATOR, "kinds", "default", action="deny", tool="add", kind="write")
            assert bad.value.field == "kind"
            with pytest.raises(NotFound) as absent:
                await set_rule(w.rt, OPERATOR, "kinds", "default", action="deny", tool="nope")
            assert absent.value.field == "tool"
            shown = await set_rule(w.rt, OPERATOR, "kinds", "default", action="deny", tool=WRITE)
            assert shown["rules"] == {"toolkit": None, "kinds": {}, "tools": {WRITE: "deny"}}
            shown = await set_rule(w.rt, OPERATOR, "kinds", "default", action=None, tool="add")
            assert shown["rules"]["tools"] == {}

    run(scenario())


def test_a_read_only_key_cannot_be_widened_by_its_agent_nor_lift_its_own_guard() -> None:
    async def scenario() -> None:
        async with world() as w:
            agent = await people.create_agent(w.rt, OPERATOR, "bot", user="payer")
            _, listed = await key_ops.issue(w.rt, OPERATOR, agent_id=agent["id"], read_only=True)
            assert listed["read_only"] and listed["effective_read_only"]
            await people.update_agent(w.rt, OPERATOR, agent["id"], read_only=False)
            secret, plain = await key_ops.issue(w.rt, OPERATOR, agent_id=agent["id"])
            assert not plain["effective_read_only"]
            await people.update_agent(w.rt, OPERATOR, agent["id"], read_only=True)  # narrows every key
            keys = await key_ops.list_keys(w.rt, OPERATOR, agent_id=agent["id"])
            assert [k["effective_read_only"] for k in keys] == [True, True]
            who = await key_ops.authenticate(w.rt, secret)
            assert who.read_only
            with pytest.raises(CallRefused):
                await pipeline.call_tool(w.rt, who, WRITE, {})
            # A person's read-only key manages nothing that would lift a guard.
            own_secret, own = await key_ops.issue(w.rt, OPERATOR, user="payer", read_only=True)
            me = await key_ops.authenticate(w.rt, own_secret)
            with pytest.raises(Forbidden):
                await key_ops.set_read_only(w.rt, me, own["prefix"], False)
            with pytest.raises(Forbidden):
                await key_ops.issue(w.rt, me)
            await key_ops.issue(w.rt, me, read_only=True)  # a read-only key may hand out its own kind
            with pytest.raises(Forbidden):
                await people.update_agent(w.rt, me, agent["id"], read_only=False)

    run(scenario())


def test_rules_are_read_once_per_generation_and_a_change_counts_from_the_next_call() -> None:
    async def scenario() -> None:
        async with world() as w:
            first = await policy.rules(w.rt)
            assert first is await policy.rules(w.rt) and first.version == 0
            await policy_ops.set_toolkit_policy(
                w.rt, OPERATOR, "kinds", "default", action="deny", kind="write"
            )
            after = await policy.rules(w.rt)
            assert after.version == 1 and len(after.denied) == 1
            with pytest.raises(CallRefused):
                await pipeline.call_tool(w.rt, w.payer, WRITE, {})

    run(scenario())


def test_refusal_is_one_rule_for_the_stage_and_for_search() -> None:
    rules = rules_room.Rules(
        version=3,
        toolkits={1: "deny"},
        kinds={(1, "read"): "allow"},
        tools={(1, "k__x"): "deny"},
    )
    assert rules_room.refusal(rules, 1, "k__x", "read", read_only=False) == ("policy_denied", "tool")
    assert rules_room.refusal(rules, 1, "k__y", "read", read_only=False) is None
    assert rules_room.refusal(rules, 1, "k__y", "write", read_only=False) == ("policy_denied", "toolkit")
    assert rules_room.refusal(rules, 2, "j__y", "write", read_only=False) is None
    # The guard comes first, and no allow rule lifts it.
    assert rules_room.refusal(rules, 2, "j__y", "write", read_only=True) == ("read_only", "read_only")
    assert rules_room.refusal(rules_room.NO_RULES, 2, "j__y", "read", read_only=True) is None


def test_the_policy_stage_costs_under_0_05_ms_p50_on_an_allowed_call() -> None:
    """Issue 20's figure: the stage timed alone on an allowed call (rules remembered, as on
    every call after the first of a generation), over 10,000 calls."""

    async def scenario() -> list[float]:
        async with world() as w:
            # A rule on the toolkit (allow), so the allowed call takes the rule lookup too.
            await policy_ops.set_toolkit_policy(
                w.rt, OPERATOR, "kinds", "default", action="deny", kind="write"
            )
            found, _ = await search_tools(w.rt, "kinds", principal=w.payer, limit=10)
            tool = next(t for t in found if t.name == READ)
            samples = []
            with w.rt.db.one_look():  # one request's pinned look, as the MCP endpoint takes
                for _ in range(10_000):
                    started = time.perf_counter()
                    await policy.check(w.rt, w.payer, tool)
                    samples.append(time.perf_counter() - started)
            return samples

    samples = run(scenario())
    p50 = statistics.median(samples) * 1000
    print(f"policy stage p50 {p50:.4f} ms, p99 {sorted(samples)[9899] * 1000:.4f} ms")
    assert p50 < 0.05
