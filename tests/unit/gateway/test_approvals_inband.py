"""Asking in band (``gateway/approvals_inband.py``) on a real runtime and database, in the
world of ``test_approvals.py``: whose approval may be answered at the client, what the
person reads, what an answer means, the decision and its audit row, and the 2026-07-28
request state (sealed, bound to the principal, the request and the expiry).
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from appliance.errors import InvalidParams
from appliance.gateway import approvals_inband as inband
from appliance.gateway import pipeline
from appliance.gateway.admin import approvals as queue
from appliance.models import OPERATOR
from tests.unit.gateway.test_approvals import ARGS, DESTROY, agent_of, approve_destroys, asked, body, world
from tests.unit.gateway.test_policy import run


def test_what_an_elicitation_result_says() -> None:
    assert inband.verdict({"action": "accept", "content": {"approve": True}}) == "approve"
    assert inband.verdict({"action": "accept", "content": {"approve": False}}) == "deny"
    assert inband.verdict({"action": "decline"}) == "deny"
    for nothing in (
        {"action": "cancel"},
        {"action": "accept"},
        {"action": "accept", "content": {"approve": "yes"}},  # only a boolean true approves
        {"action": "accept", "content": {"approve": 1}},
        {"action": "maybe"},
        None,
        [],
    ):
        assert inband.verdict(nothing) == "none", nothing


def test_only_an_approval_the_user_may_give_is_asked_in_band_and_it_reads_the_call() -> None:
    async def scenario() -> None:
        async with world() as w:
            await approve_destroys(w)  # approver: the toolkit's owner or an admin
            bot = await agent_of(w)
            assert inband.prompt(bot, await asked(w, bot)) is None
            await approve_destroys(w, "user")
            exc = await asked(w, bot)
            p = inband.prompt(bot, exc)
            assert p is not None and 0 < p.wait_s() <= inband.WAIT_S
            other = await agent_of(w, "other")
            assert inband.prompt(other, exc) is None  # another agent of the same user
            assert inband.prompt(dataclasses.replace(bot, operator=True), exc) is None
            form = await inband.elicitation(w.rt, p)
            text = form["message"]
            assert form["mode"] == "form" and "your agent bot" in text and f"{DESTROY} (destructive)" in text
            assert '{"a":true,"b":[1,2,{"x":"é","y":1}]}' in text and "Cost: 1 credit." in text
            assert form["requestedSchema"]["required"] == ["approve"]
            long = await asked(w, bot, body(text="x" * 5000))
            lp = inband.prompt(bot, long)
            assert lp is not None
            shown = (await inband.elicitation(w.rt, lp))["message"]
            assert len(shown) < 1600 and "more characters)" in shown

    run(scenario())


def test_a_decision_in_band_is_the_consoles_with_its_audit_row_and_only_for_its_asker() -> None:
    async def scenario() -> None:
        async with world() as w:
            await approve_destroys(w, "user")
            bot, other = await agent_of(w), await agent_of(w, "other")
            approval_id = (await asked(w, bot)).data["approval"]["id"]
            assert not await inband.decide(w.rt, other, approval_id, True)  # not theirs
            assert await inband.decide(w.rt, bot, approval_id, True)
            assert not await inband.decide(w.rt, bot, approval_id, False)  # no longer pending
            [shown] = (await queue.list_approvals(w.rt, OPERATOR, state="approved"))["approvals"]
            assert shown["decided_by"] == "payer in band"
            result = await pipeline.call_tool(w.rt, bot, DESTROY, dict(ARGS), approval=approval_id)
            assert not result.is_error and w.upstream.hits == ["DELETE"]
            assert [r[2] for r in await w.rows()] == [
                "approval_required",
                "approval_granted",
                "approval_used",
            ]

    run(scenario())


def test_the_request_state_is_sealed_and_bound_to_principal_request_and_expiry() -> None:
    async def scenario() -> None:
        async with world() as w:
            await approve_destroys(w, "user")
            bot, other = await agent_of(w), await agent_of(w, "other")
            p = inband.prompt(bot, await asked(w, bot))
            assert p is not None
            request = inband.request_of(None, {"name": DESTROY, "arguments": ARGS})
            state = inband.seal(bot, p, request)
            assert inband.unseal(bot, state, request) == (p.id, True)
            changed = inband.request_of(None, {"name": DESTROY, "arguments": body(a=False)})
            assert inband.unseal(bot, state, changed) == (p.id, False)
            head, mac = state.split(".")
            for bad in (state + "A", f"{head}.{mac[:-2]}", "x" * 2000, 42, None, "a.b.c", f"{mac}.{head}"):
                with pytest.raises(InvalidParams):
                    inband.unseal(bot, bad, request)
            with pytest.raises(InvalidParams):
                inband.unseal(other, state, request)  # another principal's state
            with pytest.raises(InvalidParams):
                inband.unseal(bot, state, request, now=time.time() + 10_000)  # past the expiry

    run(scenario())
