"""The call's accounting rules: the rate limit, who calls free, the reservation, the fee's fate.

Stages of the pipeline (``gateway/pipeline.py``), each reading and writing the attempt:

- ``limit``: the rate limit comes first, before the name is even resolved.
- ``reserve``: once the tool is resolved and its input checked, and before the upstream is
  contacted, it checks that the call's accounting can be written (``db/space.py``: a disk
  nearly full, or writes failing, refuse the call before it leaves, since a call that
  reached the upstream and then could not be recorded acted unaccounted), then the
  toolkit's ceilings, the key's own budget (a narrower key's, issue 20) and the caller's
  credit, and reserves the tool's fee (its own, its kind's or its toolkit's: the book's
  ``Price.fee_for``; the book makes all that atomic: no ``await`` between check and hold).
- ``answered`` and ``upstream_failed``: the fee is charged when the upstream was reached,
  its errors and timeouts included (it may have acted), and let go when the call never
  left (blocked, broken upstream, no credential). The charge itself is written with the
  audit row (``gateway/audit.py``).

Owners call their own toolkits free and uncounted (still rate-limited and audited). The
``operator`` (the CLI run without a key by whoever owns the data directory) too.
"""

from __future__ import annotations

import math

import orjson

from appliance.errors import RateLimited, StorageError, UpstreamError
from appliance.gateway import telemetry
from appliance.gateway.attempt import Attempt
from appliance.gateway.runtime import Runtime
from appliance.ledger.book import Budget
from appliance.ledger.store import Price
from appliance.models import CallResult, Principal, Tool

# Reasons that prove the call never left the gateway: the reservation is let go. So does an
# UpstreamError with ``sent=False`` (the name did not resolve, the connection was refused).
# Any other failure (timeouts, reset connections, bad answers) may have acted upstream.
NEVER_LEFT = frozenset(
    {"ssrf_blocked", "no_upstream", "credential_unavailable", "upstream_broken", "upstream_tls"}
)


def identity(principal: Principal) -> str:
    """Whom the rate limit counts: the agent, else the key."""
    if principal.agent_id is not None:
        return f"agent:{principal.agent_id}"
    return f"key:{principal.key_prefix}"


def is_owner(principal: Principal, price: Price) -> bool:
    """The toolkit is this principal's user's (an agent acts for its user)."""
    if principal.operator:
        return True
    if price.owner_id is None:
        return principal.is_admin  # the platform's toolkits belong to every admin
    return price.owner_id == principal.user_id


def calls_free(principal: Principal, price: Price) -> bool:
    """Only the owner in person calls free: not their agents (RELIABILITY LEDGER-08), whose
    calls are metered like anyone's, so an owner can cap what their own automation spends."""
    return is_owner(principal, price) and principal.agent_id is None


def limit(rt: Runtime, principal: Principal, *, browse: bool = False) -> None:
    """The rate limit for one request: -32001 with ``retry_after_s`` when over it."""
    limiter = rt.browse_limiter if browse else rt.call_limiter
    wait = limiter.take(identity(principal))
    if wait > 0:
        scope = "browse" if browse else "call"
        telemetry.RATE_LIMITED.labels(scope).inc()
        per = rt.settings.rate_limit_window_s
        raise RateLimited(
            f"rate limit reached ({limiter.limit} {'searches' if browse else 'tool calls'} per "
            f"{per:g} s); retry after {wait:.2f} s",
            data={"retry_after_s": round(wait, 3), "retry_after": math.ceil(wait), "scope": scope},
        )


def admit_browse(rt: Runtime, principal: Principal) -> None:
    """A cheap but floodable request (tools/list, search, the handshake) under the browse
    limit (RELIABILITY RATE-05). Callers without a key share no identity to count by."""
    if not principal.anonymous:
        limit(rt, principal, browse=True)


async def reserve(rt: Runtime, attempt: Attempt, tool: Tool) -> None:
    """Stage: storage → price → quota → key budget → balance → hold the fee (nothing for the owner)."""
    if rt.db.storage.problem() is not None:  # free calls too: every call has its audit row
        raise StorageError(
            "storage unavailable: the call was not sent, since it could not be recorded; try again shortly",
            data={"sent": False},
        )
    price = await rt.book.price(tool.toolkit_id, toolkit=tool.toolkit)
    payer = attempt.principal
    attempt.owner = calls_free(payer, price)
    if not attempt.owner:
        attempt.reservation = await rt.book.reserve(
            tool.toolkit_id,
            payer.user_id,
            toolkit=tool.toolkit,
            tool=tool.name,
            kind=tool.kind,
            budget=budget_of(payer),
        )


def budget_of(principal: Principal) -> Budget | None:
    """The calling key's own budget, when it has one (counted by its prefix)."""
    return None if principal.budget is None else Budget(principal.key_prefix, principal.budget)


def answered(attempt: Attempt, result: CallResult) -> None:
    """The upstream answered (an ``isError`` result included): charged, counted in bytes."""
    attempt.result = result
    attempt.outcome = "is_error" if result.is_error else "ok"
    attempt.reason = result.meta.get("reason") if result.is_error else None
    attempt.bytes = len(orjson.dumps(result.content))


def upstream_failed(rt: Runtime, attempt: Attempt, exc: UpstreamError) -> None:
    """The upstream failed or could not be reached: an ``isError`` result for the caller (never
    a protocol error); the audit keeps the difference, and the fee goes when it never left."""
    attempt.reason = exc.reason
    if exc.reason in NEVER_LEFT:
        attempt.outcome, attempt.sent = "blocked", False
    else:
        attempt.outcome = "upstream_error"
        if not exc.sent:  # the upstream is down, and provably got nothing: no charge
            attempt.sent = False
    if not attempt.sent:
        let_go(rt, attempt)
    attempt.result = CallResult(
        content=[{"type": "text", "text": exc.public_message}],
        is_error=True,
        meta={"reason": exc.reason, **exc.data},
    )


def let_go(rt: Runtime, attempt: Attempt) -> None:
    """The call never left: its reservation is released (nothing is written)."""
    if attempt.reservation is not None:
        rt.book.release(attempt.reservation)
        attempt.reservation = None
