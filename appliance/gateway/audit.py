"""The record stage: every authenticated attempt leaves exactly one audit row, durable first.

A call is answered only once its row (and its charge, when the upstream was reached) is
committed (``ledger/book.py``: group commit). Rows are written here and nowhere else: for
calls that ran (``record``), were refused on the way (``refusal``), were cut off
(``interrupted``), were refused before the pipeline could start (``refused``: a malformed
envelope, a name ``/mcp/<slug>`` does not serve, a runner's own bad arguments, an
idempotency conflict) or were answered from an idempotency key's stored result
(``replayed``).

``rt.calls_in_flight`` counts attempts between their start and their row's
acknowledgement: the book commits the row of a lone one on the event loop (``alone``),
concurrent ones share a batch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

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
from appliance.gateway import accounting, telemetry
from appliance.gateway.attempt import Attempt
from appliance.gateway.runtime import Runtime
from appliance.ledger.store import AuditRow
from appliance.models import CallResult, Principal, Tool

log = logging.getLogger(__name__)


async def record(rt: Runtime, attempt: Attempt) -> None:
    """Stage: the row of an answered call (an ``isError`` result included), acknowledged."""
    tool = attempt.tool
    log.info(
        "call tool=%s key=%s outcome=%s ms=%.1f",
        tool.name if tool is not None else attempt.name,
        attempt.principal.key_prefix,
        "error" if attempt.result is None or attempt.result.is_error else "ok",
        (time.perf_counter() - attempt.started) * 1000,
    )
    # As ``acknowledge``, inline: the call's every suspension unwinds one frame less.
    durable = _queue(rt, attempt)
    try:
        await asyncio.shield(durable)
    except ApplianceError:
        raise
    except Exception as exc:
        raise StorageError("the call's audit record could not be stored") from exc
    _timed(attempt)


async def refusal(rt: Runtime, attempt: Attempt, exc: ApplianceError) -> None:
    """Stage: the row of a call the pipeline refused (nothing left: no charge)."""
    classify(attempt, exc)
    try:
        await acknowledge(_queue(rt, attempt))
    except StorageError:
        if not isinstance(exc, StorageError):
            raise
        # Refused for want of storage, and its own row could not be stored either: the
        # refusal (nothing was sent) is the answer.
    _timed(attempt)


def interrupted(rt: Runtime, attempt: Attempt) -> None:
    """Cancelled (the client went away) or a bug. Once sent, the upstream may have acted, so
    the fee is charged; before, it is let go. The row is queued, not awaited: we are unwinding."""
    attempt.outcome = "upstream_error" if attempt.sent else "blocked"
    attempt.reason = "interrupted"
    _queue(rt, attempt)


async def refused(
    rt: Runtime, principal: Principal, name: Any, exc: ApplianceError, *, runner: str | None = None
) -> None:
    """The row of a tools/call refused before the pipeline could start. Every authenticated
    attempt leaves one row (anonymous ones none)."""
    if principal.anonymous:
        return
    attempt = Attempt(principal, name, runner=runner)
    classify(attempt, exc)
    if exc.reason == "idempotency_key_reused":
        attempt.outcome = "invalid"  # the caller's mistake; in progress stays `blocked`
    await _alone(rt, attempt)


async def replayed(
    rt: Runtime,
    principal: Principal,
    name: str,
    result: CallResult,
    *,
    tool: Tool | None = None,
    runner: str | None = None,
) -> None:
    """The row of a retry answered from its idempotency key's stored result (I-3: every
    authenticated attempt leaves one row): nothing ran and nothing was charged, so fee 0 and
    reason ``idempotent_replay``; the outcome is the stored result's. ``tool``, when the
    caller could name it, attributes the row to its toolkit."""
    if principal.anonymous:
        return
    attempt = Attempt(principal, name, runner=runner, tool=tool)
    attempt.outcome = "is_error" if result.is_error else "ok"
    attempt.reason = "idempotent_replay"
    await _alone(rt, attempt)


async def script(rt: Runtime, attempt: Attempt) -> None:
    """The row of a script run itself (``gateway/code_runs.py``): after its calls' own rows,
    with its outcome and, in ``detail``, its hash and its calls; never charged."""
    await _alone(rt, attempt)


async def _alone(rt: Runtime, attempt: Attempt) -> None:
    """A row written outside the pipeline counts as an attempt in flight all the same."""
    rt.calls_in_flight += 1
    try:
        await acknowledge(_queue(rt, attempt))
    finally:
        rt.calls_in_flight -= 1


def classify(attempt: Attempt, exc: ApplianceError) -> None:
    """A refusal's outcome in the audit vocabulary; its reason is the error's."""
    attempt.reason = exc.reason
    if isinstance(exc, RateLimited):
        attempt.outcome = "rate_limited"
    elif isinstance(exc, QuotaExhausted):
        attempt.outcome = "quota"
    elif isinstance(exc, UpstreamError):
        attempt.outcome = "blocked" if exc.reason in accounting.NEVER_LEFT else "upstream_error"
    elif isinstance(exc, InvalidParams | NotFound):  # NotFound: a toolkit endpoint it cannot see
        attempt.outcome = "invalid"
    elif isinstance(exc, Unauthorized | Forbidden):
        attempt.outcome = "blocked"
    else:
        attempt.outcome = "blocked"  # storage and the like, before anything was sent


def _queue(rt: Runtime, attempt: Attempt) -> asyncio.Future[Any]:
    """Queue the attempt's audit row, with its charge when the upstream was reached."""
    p, tool = attempt.principal, attempt.tool
    if not attempt.sent:
        accounting.let_go(rt, attempt)
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
        tool=tool.name if tool else str(attempt.name)[:256],
        runner=attempt.runner,
        outcome=attempt.outcome,
        # A redaction, then an approval used, is worth a reason when the call had none (ok).
        reason=attempt.reason
        or ("secret_redacted" if attempt.redacted else None)
        or ("approval_used" if attempt.consumed else None),
        duration_ms=(time.perf_counter() - attempt.started) * 1000,
        bytes=attempt.bytes,
        fee=0,
        owner_call=attempt.owner,
        redacted=attempt.redacted,
        detail=attempt.detail,
        code_run=attempt.code_run,
    )
    kit = tool.toolkit if tool else ""
    telemetry.child(telemetry.CALLS, kit, tool.kind if tool else "unknown", attempt.outcome).inc()
    if attempt.upstream_s:
        telemetry.child(telemetry.UPSTREAM_SECONDS, kit).observe(attempt.upstream_s)
    return rt.book.record(row, attempt.reservation, alone=rt.calls_in_flight == 1)


def _timed(attempt: Attempt) -> None:
    """The whole call as the gateway served it, the durable acknowledgement included."""
    kit = attempt.tool.toolkit if attempt.tool else ""
    telemetry.child(telemetry.CALL_SECONDS, kit).observe(time.perf_counter() - attempt.started)


async def acknowledge(durable: asyncio.Future[Any]) -> None:
    """Return only once the row (and charge) is committed; a failed commit is -32003."""
    try:
        await asyncio.shield(durable)
    except ApplianceError:
        raise
    except Exception as exc:
        raise StorageError("the call's audit record could not be stored") from exc
