"""The pipeline's approval stage (``gateway/approvals.py``) and the queue's operations
(``gateway/admin/approvals.py``) on a real runtime and database.

The world is ``test_policy.py``'s (an OpenAPI toolkit answered in process that counts what
reaches it), its tools taking a free JSON body. Its destructive tool gets an ``approve``
rule. Every refusal is checked where it matters: nothing reached the upstream and nothing
was charged.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from appliance import config
from appliance.access import approvals as store
from appliance.errors import ApprovalRefused, ApprovalRequired, Conflict, Forbidden, NotFound, QuotaExhausted
from appliance.gateway import pipeline, telemetry
from appliance.gateway.admin import approvals as queue
from appliance.gateway.admin import people
from appliance.gateway.admin import policy as policy_ops
from appliance.gateway.imports import import_openapi
from appliance.gateway.policy import rules
from appliance.gateway.runtime import Runtime
from appliance.ledger import store as ledger_store
from appliance.models import OPERATOR, Principal
from tests.support.runtimes import plain_user
from tests.unit.gateway.test_policy import DESTROY, FEE, ORIGIN, READ, SPEC, WRITE, Upstream, World, run

_BODY = {"requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}}}
BODY_SPEC = {
    **SPEC,
    "paths": {
        "/notes": {m: {**op, **_BODY} if m != "get" else op for m, op in SPEC["paths"]["/notes"].items()}
    },
}
ARGS = {"body": {"b": [1, 2.0, {"y": 1, "x": "é"}], "a": True}}


def body(**values: Any) -> dict[str, Any]:
    return {"body": values}


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
            await import_openapi(rt, "kinds.json", slug="kinds", data=orjson.dumps(BODY_SPEC))
            async with rt.db.write() as tx:
                await tx.run(
                    "UPDATE toolkits SET visibility = 'published', is_default = 1 WHERE slug = 'kinds'"
                )
            payer = await plain_user(rt, "payer")
            await rt.book.admin(lambda r: ledger_store.insert_grant(r, 0.0, payer.user_id, 10 * FEE, "t", ""))
            yield World(rt, upstream, payer)
        finally:
            await rt.close()


async def approve_destroys(w: World, approver: str | None = None) -> None:
    await policy_ops.set_toolkit_policy(
        w.rt, OPERATOR, "kinds", "default", action="approve", kind="destructive", approver=approver
    )


async def agent_of(w: World, name: str = "bot") -> Principal:
    agent = await people.create_agent(w.rt, OPERATOR, name, user="payer")
    return Principal(
        user_id=w.payer.user_id,
        name=w.payer.name,
        is_admin=False,
        key_prefix=f"tsk_{name}",
        agent_id=agent["id"],
        agent_name=name,
    )


async def asked(w: World, who: Principal, args: dict[str, Any] | None = None, **kw: Any) -> ApprovalRequired:
    with pytest.raises(ApprovalRequired) as refused:
        await pipeline.call_tool(w.rt, who, DESTROY, dict(ARGS if args is None else args), **kw)
    return refused.value


def event_count(event: str) -> float:
    return float(telemetry.APPROVALS.labels(event)._value.get())


def test_canonical_json_ignores_key_order_whitespace_and_integral_float_spelling() -> None:
    one = store.canonical({"b": [1, 2.0, {"y": 1, "x": "é"}], "a": True})
    assert one == '{"a":true,"b":[1,2,{"x":"é","y":1}]}'
    spaced = orjson.loads('{ "a" : true,\n "b": [1.0, 2, {"x": "\\u00e9", "y": 1.0}] }')
    assert store.canonical(spaced) == one
    assert store.digest(one) == store.digest(store.canonical(ARGS["body"]))
    for changed in ({"a": False, "b": [1, 2, {"y": 1, "x": "é"}]}, {"a": True, "b": [1, 2.5]}, {"a": True}):
        assert store.digest(store.canonical(changed)) != store.digest(one)


def test_a_call_under_an_approve_rule_waits_then_runs_once_with_its_approval() -> None:
    async def scenario() -> None:
        async with world() as w:
            await approve_destroys(w)
            bot = await agent_of(w)
            requested = event_count("requested")
            first = await asked(w, bot)
            again = await asked(w, bot, body(a=True, b=[1.0, 2, {"x": "é", "y": 1}]))  # the same call
            info = first.data["approval"]
            assert info["id"] == again.data["approval"]["id"] and info["state"] == "pending"
            assert info["url"] == f"/console/approvals#{info['id']}"
            assert first.rpc_code == -32007 and "_meta" in first.public_message
            assert event_count("requested") == requested + 1  # reused, not asked twice
            # A pending approval does not run the call; nothing was sent or charged.
            await asked(w, bot, approval=info["id"])
            assert w.upstream.hits == [] and await w.balance() == 10 * FEE
            listed = (await queue.list_approvals(w.rt, OPERATOR))["approvals"]
            assert [(a["id"], a["state"], a["arguments"], a["fee"]) for a in listed] == [
                (info["id"], "pending", store.canonical(ARGS), 1)
            ]
            await queue.decide(w.rt, OPERATOR, info["id"], approve=True)
            result = await pipeline.call_tool(w.rt, bot, DESTROY, dict(ARGS), approval=info["id"])
            assert not result.is_error and w.upstream.hits == ["DELETE"]
            assert await w.balance() == 9 * FEE
            with pytest.raises(ApprovalRefused) as second:
                await pipeline.call_tool(w.rt, bot, DESTROY, dict(ARGS), approval=info["id"])
            assert second.value.reason == "approval_used" and w.upstream.hits == ["DELETE"]
            reasons = [r[2] for r in await w.rows()]
            assert reasons == [
                "approval_required",
                "approval_required",
                "approval_required",
                "approval_granted",
                "approval_used",
                "approval_used",
            ]
            outcomes = [r[1] for r in await w.rows()]
            assert outcomes == ["blocked"] * 4 + ["ok", "blocked"]

    run(scenario())


def test_a_retry_is_refused_with_nothing_sent_unless_its_approval_covers_exactly_that_call() -> None:
    async def scenario() -> None:
        async with world(TOOLSPOKE_APPROVAL_TTL_S="10") as w:
            await approve_destroys(w)
            bot, other = await agent_of(w), await agent_of(w, "other")
            first = (await asked(w, bot)).data["approval"]["id"]
            await queue.decide(w.rt, OPERATOR, first, approve=True)

            async def refused(who: Principal, args: dict[str, Any], approval: str) -> str:
                with pytest.raises(ApprovalRefused) as why:
                    await pipeline.call_tool(w.rt, who, DESTROY, args, approval=approval)
                return why.value.reason

            assert await refused(bot, body(**{**ARGS["body"], "a": False}), first) == "approval_mismatch"
            assert await refused(other, dict(ARGS), first) == "approval_unknown"
            assert await refused(bot, dict(ARGS), "apr_nothing") == "approval_unknown"
            await policy_ops.set_toolkit_policy(w.rt, OPERATOR, "kinds", "default", action="approve")
            with pytest.raises(ApprovalRefused) as other_tool:  # the write tool now needs one too
                await pipeline.call_tool(w.rt, bot, WRITE, dict(ARGS), approval=first)
            assert other_tool.value.reason == "approval_mismatch"
            # the toolkit-wide rule moved the policy version: the approval is stale now
            assert await refused(bot, dict(ARGS), first) == "approval_stale"

            denied = (await asked(w, bot, body(c=1))).data["approval"]["id"]
            await queue.decide(w.rt, OPERATOR, denied, approve=False)
            assert await refused(bot, body(c=1), denied) == "approval_denied"
            with pytest.raises(Conflict):
                await queue.decide(w.rt, OPERATOR, denied, approve=True)

            late = (await asked(w, bot, body(d=1))).data["approval"]["id"]
            await queue.decide(w.rt, OPERATOR, late, approve=True)
            async with w.rt.db.write() as tx:  # its time has come
                await tx.run("UPDATE approvals SET expires_at = ? WHERE id = ?", (time.time() - 1, late))
            assert await refused(bot, body(d=1), late) == "approval_expired"
            assert w.upstream.hits == [] and await w.balance() == 10 * FEE
            events = [r[2] for r in await w.rows() if r[1] == "blocked" and r[2] != "approval_required"]
            assert "approval_expired" in events and "approval_denied" in events

    run(scenario())


def test_an_approval_runs_once_under_concurrent_retries() -> None:
    async def scenario() -> None:
        async with world() as w:
            await approve_destroys(w)
            bot = await agent_of(w)
            approval = (await asked(w, bot)).data["approval"]["id"]
            await queue.decide(w.rt, OPERATOR, approval, approve=True)
            tries = [pipeline.call_tool(w.rt, bot, DESTROY, dict(ARGS), approval=approval) for _ in range(8)]
            outcomes = await asyncio.gather(*tries, return_exceptions=True)
            ran = [o for o in outcomes if not isinstance(o, BaseException)]
            refused = [o for o in outcomes if isinstance(o, ApprovalRefused)]
            assert len(ran) == 1 and len(refused) == 7, outcomes
            assert {r.reason for r in refused} == {"approval_used"}
            assert w.upstream.hits == ["DELETE"] and await w.balance() == 9 * FEE

    run(scenario())


def test_the_same_idempotency_key_runs_the_approved_call_and_a_refusal_before_sending_gives_it_back() -> None:
    async def scenario() -> None:
        async with world() as w:
            await approve_destroys(w)
            bot = await agent_of(w)
            approval = (await asked(w, bot, key="k1")).data["approval"]["id"]
            await queue.decide(w.rt, OPERATOR, approval, approve=True)
            await asked(w, bot, key="k2")  # another key: still only the id would do
            uid = w.payer.user_id
            await w.rt.book.admin(lambda r: ledger_store.insert_grant(r, 0.0, uid, -10 * FEE, "t", ""))
            with pytest.raises(QuotaExhausted):  # no credit left: refused at the reservation
                await pipeline.call_tool(w.rt, bot, DESTROY, dict(ARGS), key="k1")
            assert w.upstream.hits == []
            async with w.rt.db.read() as conn:
                state = await conn.one("SELECT state FROM approvals WHERE id = ?", (approval,))
            assert state[0] == "approved"  # nothing was sent: the approval stands
            await w.rt.book.admin(lambda r: ledger_store.insert_grant(r, 0.0, uid, 10 * FEE, "t", ""))
            result = await pipeline.call_tool(w.rt, bot, DESTROY, dict(ARGS), key="k1")
            assert not result.is_error and w.upstream.hits == ["DELETE"]
            await asked(w, bot, key="k1")  # used: the same key asks anew

    run(scenario())


def test_who_may_decide_follows_the_rules_approver() -> None:
    async def scenario() -> None:
        async with world() as w:
            stranger = await plain_user(w.rt, "stranger")
            bot = await agent_of(w)
            for approver, payer_may in (("owner", False), ("user", True), ("admin", False)):
                await approve_destroys(w, approver)
                approval = (await asked(w, bot, body(n=approver))).data["approval"]["id"]
                with pytest.raises(NotFound):
                    await queue.decide(w.rt, stranger, approval, approve=True)
                assert (await queue.list_approvals(w.rt, stranger))["approvals"] == []
                mine = (await queue.list_approvals(w.rt, w.payer))["approvals"]
                assert [a["may_decide"] for a in mine if a["id"] == approval] == [payer_may]
                with pytest.raises(Forbidden):  # an agent never decides
                    await queue.decide(w.rt, bot, approval, approve=True)
                if payer_may:
                    await queue.decide(w.rt, w.payer, approval, approve=True)
                else:
                    with pytest.raises(NotFound):
                        await queue.decide(w.rt, w.payer, approval, approve=True)

    run(scenario())


def test_an_allowed_call_makes_no_approval_and_the_rules_stay_remembered() -> None:
    async def scenario() -> None:
        async with world() as w:
            await approve_destroys(w)
            current = await rules(w.rt)
            assert current.approver(1, DESTROY, "destructive", "kind") == "owner"
            await pipeline.call_tool(w.rt, w.payer, READ, {})
            assert w.rt.db.memo().get(("call_policy",)) is current  # no reader hop, no new read
            async with w.rt.db.read() as conn:
                assert (await conn.one("SELECT count(*) FROM approvals"))[0] == 0

    run(scenario())
