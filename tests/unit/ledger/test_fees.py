"""Fees per kind and per tool, and a key's own budget (issue 20), in the book on a real database:
the most specific fee is the one reserved and charged, exactly, under concurrent calls of mixed
kinds; a key's budget refuses the call that would pass it, counts calls in flight, and comes
back when a charge is voided; ``Standing.calls_left`` agrees with what ``reserve`` admits."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from appliance.errors import QuotaExhausted
from appliance.ledger import store
from appliance.ledger.book import Book, Budget
from tests.unit.ledger.test_book import grant, opened, price, row, run

KIT = 1
PAYER = 1


async def fees(book: Book, kinds: dict[str, int | None], tools: dict[str, int | None]) -> None:
    await book.admin(lambda r: store.set_fees(r, KIT, kinds, tools))


def test_the_most_specific_fee_wins_tool_then_kind_then_toolkit_then_default(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with opened(tmp_path) as (_, book):
            await grant(book, 1_000_000)
            got = await book.reserve(KIT, PAYER, toolkit="kit", tool="kit__a", kind="write")
            assert got.fee == 1000  # no price row: the default
            await fees(book, {"write": 2500, "destructive": 9000}, {"kit__a": 0})
            p = await book.price(KIT, toolkit="kit")
            assert p.fee_for("kit__a", "write") == 0  # the tool's own, even 0
            assert p.fee_for("kit__b", "write") == 2500  # its kind's
            assert p.fee_for("kit__c", "read") == 1000  # no read fee: the default
            await price(book, fee=300)
            p = await book.price(KIT, toolkit="kit")
            assert (p.fee_for("kit__c", "read"), p.fee_for("kit__d", "destructive")) == (300, 9000)
            await fees(book, {"destructive": None}, {"kit__a": None})  # removed: less specific again
            p = await book.price(KIT, toolkit="kit")
            assert (p.fee_for("kit__a", "write"), p.fee_for("kit__d", "destructive")) == (2500, 300)

    run(scenario())


FEES = {"read": 100, "write": 700, "destructive": 5000}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_concurrent_calls_of_mixed_kinds_are_charged_exactly_their_fees_and_never_past_the_credit(
    tmp_path: Path, seed: int
) -> None:
    """Sixty calls of random kinds (one tool with its own fee) race against a credit that
    cannot pay for all; with jitter before the check and in flight, some let go: every
    admitted call is charged exactly its fee, Σ charges = the audit's fees, and the balance
    never goes below 0; refused calls are refused for credit, not by a wrong figure."""
    rng = random.Random(seed)
    credit = 40_000
    tool_fee = 1_234

    async def scenario() -> None:
        async with opened(tmp_path) as (db, book):
            await grant(book, credit)
            await fees(book, dict(FEES), {"kit__special": tool_fee})
            admitted: list[int] = []
            refused: list[QuotaExhausted] = []

            async def call(n: int) -> None:
                kind = rng.choice(list(FEES))
                tool = "kit__special" if n % 7 == 0 else f"kit__{kind}{n}"
                want = tool_fee if tool == "kit__special" else FEES[kind]
                await asyncio.sleep(rng.random() / 200)
                try:
                    res = await book.reserve(KIT, PAYER, toolkit="kit", tool=tool, kind=kind)
                except QuotaExhausted as exc:
                    refused.append(exc)
                    return
                assert res.fee == want
                await asyncio.sleep(rng.random() / 100)
                if n % 11 == 0:  # never left: let go, nothing charged
                    book.release(res)
                    return
                await book.record(row(), res)
                admitted.append(want)

            await asyncio.gather(*(call(n) for n in range(60)))
            async with db.read() as conn:
                total = await conn.one(
                    "SELECT count(*) AS n, -sum(amount_milli) AS m FROM ledger_entries WHERE kind = 'charge'"
                )
                audit = await conn.one("SELECT sum(fee_milli) AS f FROM audit_log")
                left = await conn.one("SELECT sum(amount_milli) AS b FROM ledger_entries")
            assert (total["n"], total["m"]) == (len(admitted), sum(admitted))
            assert audit["f"] == sum(admitted)
            assert left["b"] == credit - sum(admitted) >= 0
            assert refused and all(e.data["window"] == "credit" for e in refused)
            assert book.balances[PAYER].held_milli == 0  # nothing left held

    run(scenario())


def test_a_key_budget_refuses_the_call_that_would_pass_it_counting_calls_in_flight(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with opened(tmp_path) as (_, book):
            await grant(book, 1_000_000)
            budget = Budget("tsk_x", 2500)
            first = await book.reserve(KIT, PAYER, toolkit="kit", budget=budget)
            second = await book.reserve(KIT, PAYER, toolkit="kit", budget=budget)
            with pytest.raises(QuotaExhausted) as over:  # 2 held + 1 > 2.5
                await book.reserve(KIT, PAYER, toolkit="kit", budget=budget)
            data = over.value.data
            shown = (data["window"], data["limit"], data["used"], data["remaining"])
            assert shown == ("key_budget", 2.5, 2, 0.5)
            assert "budget" in over.value.public_message
            # another key of the same user is not held back by this one's budget
            await book.reserve(KIT, PAYER, toolkit="kit", budget=Budget("tsk_y", 1000))
            await book.reserve(KIT, PAYER, toolkit="kit")
            book.release(second)
            await book.record(row(), first)  # row() names tsk_x: the charge's actor
            assert book.keys["tsk_x"].milli == 1000
            third = await book.reserve(KIT, PAYER, toolkit="kit", budget=budget)
            await book.record(row(), third)
            with pytest.raises(QuotaExhausted):
                await book.reserve(KIT, PAYER, toolkit="kit", budget=budget)

    run(scenario())


def test_a_budget_is_read_back_from_the_ledger_and_a_void_gives_it_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with opened(tmp_path) as (db, _):
            book = Book(db, default_fee=1000)
            await grant(book, 1_000_000)
            budget = Budget("tsk_x", 2000)
            for _ in range(2):
                await book.record(row(), await book.reserve(KIT, PAYER, toolkit="kit", budget=budget))
            await book.aclose()
            fresh = Book(db, default_fee=1000)  # a restart: only the database knows
            try:
                with pytest.raises(QuotaExhausted):
                    await fresh.reserve(KIT, PAYER, toolkit="kit", budget=budget)
                async with db.read() as conn:
                    charge = await conn.one("SELECT id FROM ledger_entries WHERE kind = 'charge' LIMIT 1")
                await fresh.admin(lambda r: store.insert_void(r, 0.0, int(charge["id"]), "admin", "refund"))
                await fresh.reserve(KIT, PAYER, toolkit="kit", budget=budget)
            finally:
                await fresh.aclose()

    run(scenario())


def test_calls_left_is_exactly_how_many_reservations_the_book_then_admits(tmp_path: Path) -> None:
    """For ceilings in calls and in credits, a credit and a key budget, the figure search shows
    (``Standing.calls_left``) is the number of reservations that then succeed."""
    cases: list[dict[str, Any]] = [
        {"price": {"fee": 300, "daily": 5}, "credit": 1_000_000, "budget": None},
        {"price": {"fee": 300, "daily": 2000, "unit": "credits"}, "credit": 1_000_000, "budget": None},
        {"price": {"fee": 300}, "credit": 1000, "budget": None},
        {"price": {"fee": 300}, "credit": 1_000_000, "budget": 1000},
        {"price": {"fee": 300, "monthly": 3}, "credit": 1000, "budget": 500},
    ]

    async def scenario(case: dict[str, Any], sub: Path) -> None:
        async with opened(sub) as (_, book):
            await price(book, **case["price"])
            await grant(book, case["credit"])
            budget = None if case["budget"] is None else Budget("tsk_x", case["budget"])
            standing = await book.standing([KIT], PAYER, budget)
            left = standing.calls_left(KIT, 300)
            assert left is not None
            for _ in range(left):
                await book.reserve(KIT, PAYER, toolkit="kit", budget=budget)
            with pytest.raises(QuotaExhausted):
                await book.reserve(KIT, PAYER, toolkit="kit", budget=budget)
            assert (await book.standing([KIT], PAYER, budget)).calls_left(KIT, 300) == 0

    for i, case in enumerate(cases):
        sub = tmp_path / str(i)
        sub.mkdir()
        run(scenario(case, sub))


def test_a_free_tool_without_a_ceiling_in_calls_has_nothing_left_to_show(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with opened(tmp_path) as (_, book):
            await price(book, fee=0)
            standing = await book.standing([KIT], PAYER)
            assert standing.calls_left(KIT, 0) is None
            await price(book, fee=0, daily=7)
            assert (await book.standing([KIT], PAYER)).calls_left(KIT, 0) == 7

    run(scenario())
