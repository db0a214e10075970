"""What a tool costs the caller, and how many more calls its ceilings allow: for search and describe.

Every result a caller may run says, compactly, what a call would be charged (``cost``, in
credits, only when not 0) and, where a ceiling applies (the toolkit's daily or monthly quota,
the caller's credit, the key's own budget), how many more calls of it the ceilings admit now
(``left``). Both come from the rules the call itself takes: ``accounting.calls_free`` (the
owner in person pays nothing and is counted nowhere: nothing shown) and the book
(``Price.fee_for``; ``Standing.calls_left``, by ``reserve``'s arithmetic, calls in flight
included). Nothing is read per tool: the book holds the figures, loaded in one batch when a
toolkit or the payer is new to it or the database changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from appliance.gateway import accounting
from appliance.gateway.runtime import Runtime
from appliance.ledger.amounts import credits
from appliance.models import Principal, Tool


async def of(rt: Runtime, principal: Principal | None, tools: Sequence[Tool]) -> dict[int, dict[str, Any]]:
    """Tool id → ``{"cost"?, "left"?}`` for the tools that have either (others: absent)."""
    if principal is None or principal.operator or principal.anonymous or not tools:
        return {}
    kits = sorted({t.toolkit_id for t in tools})
    standing = await rt.book.standing(kits, principal.user_id, accounting.budget_of(principal))
    out: dict[int, dict[str, Any]] = {}
    for tool in tools:
        price = standing.prices.get(tool.toolkit_id)
        if price is None or accounting.calls_free(principal, price):
            continue
        fee = price.fee_for(tool.name, tool.kind)
        left = standing.calls_left(tool.toolkit_id, fee)
        shown: dict[str, Any] = {}
        if fee:
            shown["cost"] = credits(fee)
        if left is not None:
            shown["left"] = left
        if shown:
            out[tool.id] = shown
    return out
