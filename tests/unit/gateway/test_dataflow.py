"""The data-flow guard (issue 20, item 7): the marks (``gateway/dataflow.py``), the rules
(``access/dataflow.py``) and the policy stage that holds an outward call.

The world is ``test_approvals.py``'s (an OpenAPI toolkit answered in process that counts what
reaches it): its read tool is labelled ``private``, its write tool ``untrusted`` and its
destructive tool ``outward``. Every held call is checked where it matters: nothing reached the
upstream and nothing was charged; the audit row carries the guard's reason.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import pytest

from appliance.access import dataflow as rules_room
from appliance.errors import ApprovalRequired, CallRefused, InvalidParams
from appliance.gateway import pipeline, policy
from appliance.gateway.admin import approvals as queue
from appliance.gateway.admin import policy as policy_ops
from appliance.gateway.attempt import Attempt
from appliance.gateway.dataflow import Taints
from appliance.gateway.searching import search_tools
from appliance.models import OPERATOR, Principal
from tests.unit.gateway.test_approvals import agent_of, world
from tests.unit.gateway.test_policy import DESTROY, ORIGIN, READ, WRITE, World, run

PRIVATE, UNTRUSTED, OUTWARD = READ, WRITE, DESTROY
GUARD = rules_room.Guard(60, "approve")


def bot(agent_id: int | None = 1, key: str = "tsk_bot") -> Principal:
    return Principal(user_id=7, name="u", is_admin=False, key_prefix=key, agent_id=agent_id, agent_name="b")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


# -- the marks --------------------------------------------------------------------------------


def test_both_marks_are_needed_and_their_order_is_irrelevant() -> None:
    for first, second in (("private", "untrusted"), ("untrusted", "private")):
        clock = Clock()
        taints = Taints(clock)
        taints.mark(bot(), frozenset({first}), "a")
        assert taints.flow(bot(), GUARD) is None  # one mark alone holds nothing
        clock.t += 5
        taints.mark(bot(), frozenset({second}), "b")
        flow = taints.flow(bot(), GUARD)
        assert flow is not None and {flow.private.tool, flow.untrusted.tool} == {"a", "b"}
        assert "within the last 60 s" in flow.text("x", clock.t)


def test_one_tool_labelled_private_and_untrusted_marks_both_and_outward_alone_marks_nothing() -> None:
    taints = Taints(Clock())
    taints.mark(bot(), frozenset({"outward"}), "send")
    assert len(taints) == 0
    taints.mark(bot(), frozenset({"private", "untrusted"}), "mail")
    flow = taints.flow(bot(), GUARD)
    assert flow is not None and flow.private.tool == flow.untrusted.tool == "mail"


def test_marks_expire_after_the_window_each_on_its_own() -> None:
    clock = Clock()
    taints = Taints(clock)
    taints.mark(bot(), frozenset({"private"}), "a")
    clock.t += 50
    taints.mark(bot(), frozenset({"untrusted"}), "b")
    clock.t += 10  # the private mark is exactly 60 s old: still within
    assert taints.flow(bot(), GUARD) is not None
    clock.t += 0.5
    assert taints.flow(bot(), GUARD) is None  # past the window: the private read no longer counts
    assert taints.flow(bot(), rules_room.Guard(600, "deny")) is not None  # a longer window still holds
    taints.mark(bot(), frozenset({"private"}), "c")  # a fresh private read: held again
    flow = taints.flow(bot(), GUARD)
    assert flow is not None and flow.private.tool == "c" and flow.untrusted.tool == "b"


def test_another_agent_and_another_key_are_unaffected() -> None:
    taints = Taints(Clock())
    taints.mark(bot(1), frozenset({"private", "untrusted"}), "mail")
    assert taints.flow(bot(1, key="tsk_other_key_of_bot"), GUARD) is not None  # the agent's, any key
    assert taints.flow(bot(2), GUARD) is None
    assert taints.flow(bot(None, key="tsk_user"), GUARD) is None  # a user's own key: its own marks
    taints.mark(bot(None, key="tsk_user"), frozenset({"private", "untrusted"}), "mail")
    assert taints.flow(bot(None, key="tsk_user2"), GUARD) is None
    assert taints.flow(OPERATOR, GUARD) is None


def test_stale_marks_are_swept_once_the_table_grows() -> None:
    clock = Clock()
    taints = Taints(clock)
    for n in range(4000):
        taints.mark(bot(n), frozenset({"private"}), "a")
    clock.t += rules_room.MAX_WINDOW_S + 1
    for n in range(10_000, 10_097):  # the 4,097th caller crosses the threshold: the stale go
        taints.mark(bot(n), frozenset({"private"}), "a")
    assert len(taints) == 97


# -- through the pipeline ---------------------------------------------------------------------


async def label(w: World, tool: str, *labels: str) -> dict[str, Any]:
    return await policy_ops.set_labels(w.rt, OPERATOR, "kinds", "default", labels=list(labels), tool=tool)


async def labelled(w: World, **guard: Any) -> None:
    await label(w, PRIVATE, "private")
    await label(w, UNTRUSTED, "untrusted")
    await label(w, OUTWARD, "outward")
    if guard:
        await policy_ops.set_guard(w.rt, OPERATOR, "kinds", "default", setting=guard)


async def details(w: World) -> list[tuple[str, str | None, str | None]]:
    await w.rt.book.sync()
    async with w.rt.db.read() as conn:
        found = await conn.all("SELECT tool, reason, detail FROM audit_log ORDER BY id")
    return [tuple(r) for r in found]


def test_private_then_untrusted_then_outward_asks_approval_nothing_sent_or_charged() -> None:
    async def scenario() -> None:
        async with world() as w:
            await labelled(w)
            agent = await agent_of(w)
            assert not (await pipeline.call_tool(w.rt, agent, OUTWARD, {})).is_error  # no history: at once
            await pipeline.call_tool(w.rt, agent, PRIVATE, {})
            await pipeline.call_tool(w.rt, agent, UNTRUSTED, {})
            hits, balance = list(w.upstream.hits), await w.balance()
            with pytest.raises(ApprovalRequired) as held:
                await pipeline.call_tool(w.rt, agent, OUTWARD, {})
            assert w.upstream.hits == hits and await w.balance() == balance
            info = held.value.data["approval"]
            assert info["rule"] == "dataflow" and PRIVATE in info["why"] and UNTRUSTED in info["why"]
            assert "data-flow guard" in held.value.public_message and "3600 s" in held.value.public_message
            tool, reason, detail = (await details(w))[-1]
            assert (tool, reason) == (OUTWARD, "approval_required")
            assert detail is not None and "outward" in detail and "3600 s" in detail and PRIVATE in detail
            # The queue says why; once approved, the retry runs once and its row keeps the reason.
            listed = (await queue.list_approvals(w.rt, OPERATOR))["approvals"]
            assert listed[0]["why"] == info["why"]
            await queue.decide(w.rt, OPERATOR, info["id"], approve=True)
            ran = await pipeline.call_tool(w.rt, agent, OUTWARD, {}, approval=info["id"])
            assert not ran.is_error and w.upstream.hits == [*hits, "DELETE"]
            rows = await details(w)
            assert rows[-2][1] == "approval_granted" and rows[-2][2] == info["why"]
            assert rows[-1][1] == "approval_used" and "data-flow guard" in (rows[-1][2] or "")
            # Another agent's outward call runs at once; so does an unlabelled appliance.
            other = await agent_of(w, "other")
            assert not (await pipeline.call_tool(w.rt, other, OUTWARD, {})).is_error

    run(scenario())


def test_with_action_deny_the_outward_call_is_refused_and_the_window_is_the_toolkits() -> None:
    async def scenario() -> None:
        async with world() as w:
            await labelled(w, window_s=120, action="deny")
            clock = Clock()
            w.rt.taints = Taints(clock)
            agent = await agent_of(w)
            await pipeline.call_tool(w.rt, agent, UNTRUSTED, {})
            await pipeline.call_tool(w.rt, agent, PRIVATE, {})
            hits = list(w.upstream.hits)
            with pytest.raises(CallRefused) as refused:
                await pipeline.call_tool(w.rt, agent, OUTWARD, {})
            assert refused.value.reason == "dataflow_denied" and w.upstream.hits == hits
            data = refused.value.data["dataflow"]
            assert data["window_s"] == 120 and data["action"] == "deny"
            assert (data["private"]["tool"], data["untrusted"]["tool"]) == (PRIVATE, UNTRUSTED)
            _, reason, detail = (await details(w))[-1]
            assert reason == "dataflow_denied" and detail is not None and "120 s" in detail
            assert "action deny" in detail and PRIVATE in detail and UNTRUSTED in detail
            clock.t += 121  # past the toolkit's window: the outward call runs
            assert not (await pipeline.call_tool(w.rt, agent, OUTWARD, {})).is_error

    run(scenario())


def test_refused_and_failed_calls_do_not_mark() -> None:
    async def scenario() -> None:
        async with world() as w:
            await labelled(w)
            await policy_ops.set_toolkit_policy(
                w.rt, OPERATOR, "kinds", "default", action="approve", tool=UNTRUSTED
            )
            agent = await agent_of(w)
            await pipeline.call_tool(w.rt, agent, PRIVATE, {})
            with pytest.raises(ApprovalRequired):  # held by its own rule: nothing came in
                await pipeline.call_tool(w.rt, agent, UNTRUSTED, {})
            await policy_ops.set_toolkit_policy(
                w.rt, OPERATOR, "kinds", "default", action=None, tool=UNTRUSTED
            )

            async def broken(method: str, target: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
                raise ConnectionResetError("gone")

            w.rt.egress.serve_locally(ORIGIN, broken)
            failed = await pipeline.call_tool(w.rt, agent, UNTRUSTED, {})
            assert failed.is_error  # the upstream failed: nothing came in
            w.rt.egress.serve_locally(ORIGIN, w.upstream.answer)
            assert not (await pipeline.call_tool(w.rt, agent, OUTWARD, {})).is_error

    run(scenario())


def test_labels_and_the_guard_are_shown_versioned_and_checked() -> None:
    async def scenario() -> None:
        async with world() as w:
            before = (await policy_ops.toolkit_policy(w.rt, OPERATOR, "kinds", "default"))["version"]
            shown = await policy_ops.set_labels(
                w.rt, OPERATOR, "kinds", "default", labels=["private", "outward"]
            )
            assert shown["labels"] == {"toolkit": ["private", "outward"], "tools": {}}
            shown = await label(w, "list")  # the action part names the tool too; [] is "no labels"
            assert shown["labels"]["tools"] == {READ: []} and shown["version"] == before + 2
            assert shown["dataflow"] == {
                "window_s": 3600,
                "action": "approve",
                "approver": "owner",
                "source": "appliance",
            }
            shown = await policy_ops.set_guard(
                w.rt,
                OPERATOR,
                "kinds",
                "default",
                setting={"window_s": 30, "action": "approve", "approver": "user"},
            )
            assert shown["dataflow"] == {
                "window_s": 30,
                "action": "approve",
                "approver": "user",
                "source": "toolkit",
            }
            for bad, field in (
                ({"labels": ["secret"]}, "labels"),
                ({"labels": "private"}, "labels"),
            ):
                with pytest.raises(InvalidParams) as refused:
                    await policy_ops.set_labels(w.rt, OPERATOR, "kinds", "default", **bad)
                assert refused.value.field == field
            for setting, field in (
                ({"window_s": 0, "action": "deny"}, "window_s"),
                ({"window_s": 10, "action": "allow"}, "action"),
                ({"window_s": 10, "action": "deny", "approver": "user"}, "approver"),
                ({"window": 10}, "dataflow"),
            ):
                with pytest.raises(InvalidParams) as refused:
                    await policy_ops.set_guard(w.rt, OPERATOR, "kinds", "default", setting=setting)
                assert refused.value.field == field
            current = await policy_ops.set_guard(w.rt, OPERATOR, "kinds", "default", setting=None)
            assert current["dataflow"]["source"] == "appliance"
            assert (await policy_ops.set_labels(w.rt, OPERATOR, "kinds", "default", labels=None, tool=READ))[
                "labels"
            ]["tools"] == {}

    run(scenario())


def test_the_guard_adds_under_0_05_ms_p50_to_the_policy_stage_on_an_allowed_call() -> None:
    """Issue 20's figure with the guard on: the policy stage alone on allowed calls (rules
    remembered) over 10,000 calls each: no label anywhere, an unlabelled tool beside labelled
    ones, and an outward tool whose caller has no marks; the marks after a labelled call too."""

    async def scenario() -> dict[str, float]:
        async with world() as w:
            found, _ = await search_tools(w.rt, "kinds", principal=w.payer, limit=10)
            tools = {t.name: t for t in found}

            async def p50(tool: str) -> float:
                samples = []
                with w.rt.db.one_look():
                    for _ in range(10_000):
                        attempt = Attempt(w.payer, tool)
                        started = time.perf_counter()
                        await policy.check(w.rt, w.payer, tools[tool], attempt)
                        samples.append(time.perf_counter() - started)
                return statistics.median(samples) * 1000

            out = {"no labels": await p50(OUTWARD)}
            await label(w, PRIVATE, "private")
            await label(w, OUTWARD, "outward")
            out["unlabelled tool"] = await p50(UNTRUSTED)
            out["outward, no marks"] = await p50(OUTWARD)
            samples = []
            for _ in range(10_000):
                started = time.perf_counter()
                w.rt.taints.mark(w.payer, frozenset({"private"}), PRIVATE)
                samples.append(time.perf_counter() - started)
            out["mark after a labelled call"] = statistics.median(samples) * 1000
            return out

    figures = run(scenario())
    print(", ".join(f"{k} p50 {v:.4f} ms" for k, v in figures.items()))
    assert all(v < 0.05 for v in figures.values()), figures
