"""Accounting on the one call path: rate limit, quota, balance, reserve; then charge or let go; audit.

Three seams in ``gateway/calls.py`` and nothing else there:

- ``@audited`` wraps ``call_tool``: the rate limit comes first (before even resolving the
  name), and every authenticated attempt, refused ones included, leaves exactly one audit
  row, acknowledged only once it is durable.
- ``resolved(tool)`` names the tool for the audit row as soon as it is known.
- ``spend(...)`` wraps the dispatch: after the tool is resolved and its input checked, and
  before the upstream is contacted, it checks that the call's accounting can be written
  (``db/space.py``: a disk nearly full, or writes failing, refuse the call before it
  leaves, since a call that reached the upstream and then could not be recorded acted
  unaccounted), then the toolkit's ceilings and the caller's credit, and reserves the fee
  (the book makes that atomic). Once the call returns, the fee
  is charged when the upstream was reached, its errors and timeouts included (it may have
  acted), and let go when the call never left (blocked, broken upstream, no credential).

Owners call their own toolkits free and uncounted (still rate-limited and audited). The
``operator`` (the CLI run without a key by whoever owns the data directory) too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import orjson

from appliance.errors import (
    ApplianceError,
    Forbidden,
    InvalidParams,
    NotFound,
    QuotaExhausted,
    RateLimited,
    StorageError,
    Unauthorized,
    UpstreamError,
)
from appliance.gateway import telemetry
from appliance.gateway.runtime import Runtime
from appliance.ledger.book import Reservation
from appliance.ledger.store import AuditRow, Price
from appliance.models import CallResult, Principal, Tool

# Reasons that prove the call never left the gateway: the reservation is let go. So does an
# UpstreamError with ``sent=False`` (the name did not resolve, the connection was refused).
# Any other failure (timeouts, reset connections, bad answers) may have acted upstream.
NEVER_LEFT = frozenset(
    {"ssrf_blocked", "no_upstream", "credential_unavailable", "upstream_broken", "upstream_tls"}
)


@dataclass
class Attempt:
    principal: Principal
    name: str
    runner: str | None
    at: float
    started: float
    tool: Tool | None = None
    outcome: str = "ok"
    reason: str | None = None
    owner: bool = False
    reservation: Reservation | None = None
    sent: bool = False  # the upstream was (or may have been) contacted
    upstream_s: float = 0.0
    bytes: int = 0
    redacted: int = 0  # values replaced by [redacted] in the answer


_CURRENT: ContextVar[Attempt | None] = ContextVar("toolspoke_attempt", default=None)

CallFn = Callable[..., Awaitable[CallResult]]


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


Resolve = Callable[..., Awaitable[Tool]]


def audited(resolve: Resolve) -> Callable[[CallFn], CallFn]:
    """Decorate ``call_tool``: rate limit first, then one durable audit row per attempt.

    ``resolve`` (``calls.resolve_tool``) names the tool of a throttled attempt for its row:
    the limit comes before the lookup, and a row without its toolkit would be missing
    from the owner's history filtered by toolkit. A name the caller cannot see stays a name.
    """

    def decorate(fn: CallFn) -> CallFn:
        return _audited(fn, resolve)

    return decorate


def _audited(fn: CallFn, resolve: Resolve) -> CallFn:
    @functools.wraps(fn)
    async def wrapper(
        rt: Runtime, principal: Principal, name: str, arguments: dict[str, Any], **kw: Any
    ) -> CallResult:
        attempt = Attempt(principal, str(name)[:256], kw.get("runner"), time.time(), time.perf_counter())
        token = _CURRENT.set(attempt)
        rt.book.calls_open += 1  # a lone call's row may be committed without the thread hop
        try:
            try:
                try:
                    limit(rt, principal)
                except RateLimited:
                    with contextlib.suppress(ApplianceError):
                        attempt.tool = await resolve(rt, principal, name, project=kw.get("project"))
                    raise
                result = await fn(rt, principal, name, arguments, **kw)
            except ApplianceError as exc:
                _classify(attempt, exc)
                try:
                    await _acknowledge(_record(rt, attempt))
                except StorageError:
                    if not isinstance(exc, StorageError):
                        raise
                    # Refused for want of storage, and its own row could not be stored
                    # either: the refusal (nothing was sent) is the answer.
                _timed(attempt)
                raise
            except BaseException:
                # Cancelled (the client went away) or a bug. Once sent, the upstream may have
                # acted, so the fee is charged; before, it is let go. The row is queued, not
                # awaited: we are unwinding.
                attempt.outcome = "upstream_error" if attempt.sent else "blocked"
                attempt.reason = "interrupted"
                _record(rt, attempt)
                raise
            finally:
                _CURRENT.reset(token)
            await _acknowledge(_record(rt, attempt))
            _timed(attempt)
            return result
        finally:
            rt.book.calls_open -= 1

    return wrapper


def resolved(tool: Tool) -> None:
    attempt = _CURRENT.get()
    if attempt is not None:
        attempt.tool = tool


def redacted(count: int) -> None:
    """The answer had ``count`` stored-secret values replaced: the audit row says so."""
    attempt = _CURRENT.get()
    if attempt is not None and count:
        attempt.redacted += count


async def spend(
    rt: Runtime, principal: Principal, tool: Tool, send: Callable[[], Awaitable[CallResult]]
) -> CallResult:
    """Quota → balance → reserve; ``send()`` reaches the upstream; the outcome decides the fee."""
    attempt = _CURRENT.get()
    if attempt is None:  # not under @audited (cannot happen through call_tool)
        attempt = Attempt(principal, tool.name, None, time.time(), time.perf_counter())
    attempt.tool = tool
    unwritable = rt.db.storage.problem()
    if unwritable is not None:  # free calls too: every call has its audit row
        raise StorageError(
            "storage unavailable: the call was not sent, since it could not be recorded; try again shortly",
            data={"sent": False},
        )
    price = await rt.book.price(tool.toolkit_id, toolkit=tool.toolkit)
    attempt.owner = calls_free(principal, price)
    if not attempt.owner:
        attempt.reservation = await rt.book.reserve(tool.toolkit_id, principal.user_id, toolkit=tool.toolkit)
    started = time.perf_counter()
    attempt.sent = True
    try:
        result = await send()
    except UpstreamError as exc:
        # calls.py turns this into an isError result; the audit keeps the difference.
        attempt.upstream_s = time.perf_counter() - started
        attempt.reason = exc.reason
        if exc.reason in NEVER_LEFT:
            attempt.outcome, attempt.sent = "blocked", False
            _let_go(rt, attempt)
        else:
            attempt.outcome = "upstream_error"
            if not exc.sent:  # the upstream is down, and provably got nothing: no charge
                attempt.sent = False
                _let_go(rt, attempt)
        raise
    except ApplianceError:
        attempt.sent = False  # refused on our side (storage, a bad binding): nothing left
        raise
    except BaseException:
        attempt.upstream_s = time.perf_counter() - started
        raise
    attempt.upstream_s = time.perf_counter() - started
    attempt.outcome = "is_error" if result.is_error else "ok"
    attempt.reason = result.meta.get("reason") if result.is_error else None
    attempt.bytes = len(orjson.dumps(result.content))
    return result


def _let_go(rt: Runtime, attempt: Attempt) -> None:
    if attempt.reservation is not None:
        rt.book.release(attempt.reservation)
        attempt.reservation = None


def _classify(attempt: Attempt, exc: ApplianceError) -> None:
    attempt.reason = exc.reason
    if isinstance(exc, RateLimited):
        attempt.outcome = "rate_limited"
    elif isinstance(exc, QuotaExhausted):
        attempt.outcome = "quota"
    elif isinstance(exc, UpstreamError):
        attempt.outcome = "blocked" if exc.reason in NEVER_LEFT else "upstream_error"
    elif isinstance(exc, InvalidParams | NotFound):  # NotFound: a toolkit endpoint it cannot see
        attempt.outcome = "invalid"
    elif isinstance(exc, Unauthorized | Forbidden):
        attempt.outcome = "blocked"
    else:
        attempt.outcome = "blocked"  # storage and the like, before anything was sent


def _record(rt: Runtime, attempt: Attempt) -> asyncio.Future[Any]:
    """Queue the attempt's audit row, with its charge when the upstream was reached."""
    p, tool = attempt.principal, attempt.tool
    if not attempt.sent:
        _let_go(rt, attempt)
    duration = time.perf_counter() - attempt.started
    row = AuditRow(
        at=attempt.at,
        user_id=p.user_id or None,
        user_name=p.name,
        agent_id=p.agent_id,
        agent_name=p.agent_name,
        key_prefix=p.key_prefix,
        toolkit_id=tool.toolkit_id if tool else None,
        toolkit=tool.toolkit if tool else None,
        project=tool.project if tool else None,
        tool=tool.name if tool else attempt.name,
        runner=attempt.runner,
        outcome=attempt.outcome,
        # A redaction is worth a reason of its own when the call had none (an ok answer).
        reason=attempt.reason or ("secret_redacted" if attempt.redacted else None),
        duration_ms=duration * 1000,
        bytes=attempt.bytes,
        fee=0,
        owner_call=attempt.owner,
        redacted=attempt.redacted,
    )
    kit = tool.toolkit if tool else ""
    telemetry.child(telemetry.CALLS, kit, tool.kind if tool else "unknown", attempt.outcome).inc()
    if attempt.upstream_s:
        telemetry.child(telemetry.UPSTREAM_SECONDS, kit).observe(attempt.upstream_s)
    return rt.book.record(row, attempt.reservation)


def _timed(attempt: Attempt) -> None:
    """The whole call as the gateway served it, the durable acknowledgement included."""
    kit = attempt.tool.toolkit if attempt.tool else ""
    telemetry.child(telemetry.CALL_SECONDS, kit).observe(time.perf_counter() - attempt.started)


async def _acknowledge(durable: asyncio.Future[Any]) -> None:
    """Return only once the row (and charge) is committed; a failed commit is -32003."""
    try:
        await asyncio.shield(durable)
    except ApplianceError:
        raise
    except Exception as exc:
        raise StorageError("the call's audit record could not be stored") from exc


async def replayed(
    rt: Runtime,
    principal: Principal,
    name: str,
    result: CallResult,
    *,
    tool: Tool | None = None,
    runner: str | None = None,
) -> None:
    """The audit row of a retry answered from its idempotency key's stored result (I-3: every
    authenticated attempt leaves one row): nothing ran and nothing was charged, so fee 0 and
    reason ``idempotent_replay``; the outcome is the stored result's. ``tool``, when the
    caller could name it, attributes the row to its toolkit."""
    if principal.anonymous:
        return
    shown = (tool.name if tool else name)[:256]
    attempt = Attempt(principal, shown, runner, time.time(), time.perf_counter(), tool=tool)
    attempt.outcome = "is_error" if result.is_error else "ok"
    attempt.reason = "idempotent_replay"
    await _acknowledge(_record(rt, attempt))


async def refused(
    rt: Runtime, principal: Principal, name: Any, exc: ApplianceError, *, runner: str | None = None
) -> None:
    """The audit row of a tools/call refused before ``call_tool`` could start: a malformed
    envelope, a name ``/mcp/<slug>`` does not serve, a runner's own bad arguments, an
    idempotency conflict. Every authenticated attempt leaves one row (anonymous ones none)."""
    if principal.anonymous:
        return
    attempt = Attempt(principal, str(name)[:256], runner, time.time(), time.perf_counter())
    _classify(attempt, exc)
    if exc.reason == "idempotency_key_reused":
        attempt.outcome = "invalid"  # the caller's mistake; in progress stays `blocked`
    await _acknowledge(_record(rt, attempt))
