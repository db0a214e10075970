"""The pipeline's approval stage (issue 20): a call under an ``approve`` rule runs only with a
person's yes for exactly that call.

After the policy stage found an ``approve`` rule (``policy.Need``) and the arguments were
validated (so nobody is asked to approve a call that could not run; validation has no side
effect), and before the reservation, the credential and the dispatch:

- a call that names no approval (``_meta`` ``toolspoke/approval``, a runner's ``approval``)
  gets ``ApprovalRequired``: a pending approval bound to the principal, the tool, the hash of
  the arguments' canonical JSON and the policy version (``access/approvals.py``), made once
  and reused when the same call is asked again; its id, the console queue's URL and how to
  retry travel in the error. Nothing was sent or charged;
- a retry that names an approval (or carries the idempotency key the approval was asked
  with) is checked against that binding and uses it up in one write transaction
  (``access/approvals.consume``): of two concurrent retries one runs, the other is refused
  as a second use. A call refused after that but before anything was sent (quota, storage)
  gets its approval back (``restore``).

The decisions (approve, deny) are ``gateway/admin/approvals.py``'s. Each event is an audit
row (outcome ``blocked``: nothing ran; reason ``approval_granted``, ``approval_denied`` or
``approval_expired``) written in the same transaction as the change it records; the request
is the refused attempt's own row (``approval_required``) and the use the call's own row
(``approval_used`` when it has no other reason). ``/metrics`` counts each event.

An allowed call never gets here: the policy stage's answer is None, and the pipeline tests it.
The in-band ways of asking (elicitation, the 2026-07-28 input-required result) take
``ApprovalRequired`` in the MCP layer before it reaches the caller, over the same approvals
(``gateway/approvals_inband.py``, ``rpc/inband.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from appliance.access import approvals as store
from appliance.db import SyncReader
from appliance.errors import ApprovalRefused, ApprovalRequired
from appliance.gateway import accounting, telemetry
from appliance.gateway.attempt import Attempt
from appliance.gateway.idempotency import scope_of
from appliance.gateway.policy import Need
from appliance.gateway.runtime import Runtime
from appliance.ledger.store import AuditRow, insert_call
from appliance.models import Tool
from appliance.protocol.meta import APPROVAL_KEY

QUEUE_PATH = "/console/approvals"
_WHY = {
    "unknown": "names no approval of this caller",
    "mismatch": "names an approval given for another call (another tool or other arguments)",
    "denied": "names an approval that was denied",
    "used": "names an approval that was already used: an approval covers one call",
    "expired": "names an approval that expired",
    "stale": "names an approval given under an earlier call policy (it changed since)",
}


def when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def url_of(approval_id: str) -> str:
    """The approval in the console's queue (relative: the appliance has no public URL setting)."""
    return f"{QUEUE_PATH}#{approval_id}"


async def gate(rt: Runtime, attempt: Attempt, tool: Tool, need: Need) -> None:
    """Stage: run only with an approval of exactly this call (raises otherwise)."""
    text = store.canonical(attempt.arguments)
    binding = store.Binding(scope_of(attempt.principal), tool.name, store.digest(text), need.version)
    now = time.time()
    if attempt.approval is not None:
        named = attempt.approval
        why, found, gone = await rt.db.writing(lambda w: _use(w, named, binding, now))
        counted(gone)
        if why == "ok":
            counted(used=1)
            attempt.consumed = named
            return
        if why == "pending" and found is not None:
            raise required(found)
        raise refused(tool, named, why)
    price = await rt.book.price(tool.toolkit_id, toolkit=tool.toolkit)
    fee = 0 if accounting.calls_free(attempt.principal, price) else price.fee
    fresh = _new(attempt, tool, need, binding, text, fee, now, now + rt.settings.approval_ttl_s)
    state, found, gone = await rt.db.writing(lambda w: _ask(w, fresh, attempt.key, now))
    counted(gone)
    if state == "used":
        counted(used=1)
        attempt.consumed = found.id
        return
    if state == "new":
        counted(requested=1)
    raise required(found)


def counted(expired: int = 0, **events: int) -> None:
    """``/metrics``' count of approval events (after their transaction committed)."""
    for event, n in (("expired", expired), *events.items()):
        if n:
            telemetry.child(telemetry.APPROVALS, event).inc(n)


def _use(w: SyncReader, approval_id: str, binding: store.Binding, now: float) -> tuple[str, Any, int]:
    """A retry naming its approval: overdue ones expire first, then the binding is checked
    and the approval used, all in this one transaction."""
    gone = expired(w, store.sweep(w, now))
    why, found = store.consume(w, approval_id, binding, now)
    return why, found, gone


def _ask(
    w: SyncReader, fresh: store.Approval, key: str | None, now: float
) -> tuple[str, store.Approval, int]:
    """A call that names no approval: its open approval (``used`` when approved and asked
    again with the idempotency key it was asked with), else the new one, pending."""
    gone = expired(w, store.sweep(w, now))
    binding = store.Binding(fresh.principal, fresh.tool, fresh.args_hash, fresh.policy_version)
    found = store.open_for(w, binding)
    if found is None:
        store.insert(w, fresh)
        return "new", fresh, gone
    if found.state == "approved" and key is not None and found.idempotency_key == key:
        why, used = store.consume(w, found.id, binding, now)
        if why == "ok" and used is not None:
            return "used", used, gone
    return "open", found, gone


def _new(
    attempt: Attempt, tool: Tool, need: Need, b: store.Binding, text: str, fee: int, now: float, until: float
) -> store.Approval:
    p = attempt.principal
    return store.Approval(
        id=store.new_id(),
        principal=b.principal,
        user_id=p.user_id or None,
        user_name=p.name,
        agent_id=p.agent_id,
        agent_name=p.agent_name,
        key_prefix=p.key_prefix,
        toolkit_id=tool.toolkit_id,
        toolkit=tool.toolkit,
        project=tool.project,
        tool=tool.name,
        kind=tool.kind,
        arguments=text,
        args_hash=b.args_hash,
        policy_version=b.policy_version,
        rule=need.rule,
        approver=need.approver,
        fee_milli=fee,
        idempotency_key=attempt.key,
        state="pending",
        created_at=now,
        expires_at=until,
        decided_at=None,
        decided_by="",
        used_at=None,
        why=need.why,
    )


async def restore(rt: Runtime, attempt: Attempt) -> None:
    """The call was refused after its approval was used but before anything was sent: the
    approval covers it still (until it expires)."""
    if attempt.consumed is None or attempt.sent:
        return
    consumed, now = attempt.consumed, time.time()
    attempt.consumed = None
    await rt.db.writing(lambda w: store.restore(w, consumed, now))


def required(a: store.Approval) -> ApprovalRequired:
    """The answer to a call that waits for a person: what to show, and how to retry."""
    retry = (
        f'call again with the same arguments and "_meta": {{"{APPROVAL_KEY}": "{a.id}"}} '
        f'(a runner: "approval": "{a.id}" beside "tool" and "input")'
    )
    if a.idempotency_key is not None:
        retry += ", or with the same idempotency key"
    if a.state == "approved":
        head = f"approval {a.id} for this call was given"
    elif a.why:
        head = f"{a.tool} needs a person's approval: the {a.why}; approval {a.id} is pending"
    else:
        head = f"{a.tool} needs a person's approval (its toolkit's {a.rule} rule); approval {a.id} is pending"
    message = (
        f"{head}: an approver decides at {url_of(a.id)} until {when(a.expires_at)}. Once approved, "
        f"{retry}. Nothing was run."
    )
    data = {
        "approval": {
            "id": a.id,
            "state": a.state,
            "url": url_of(a.id),
            "expires_at": when(a.expires_at),
            "tool": a.tool,
            "kind": a.kind,
            "rule": a.rule,
            "why": a.why or None,
            "retry": {"_meta": {APPROVAL_KEY: a.id}, "runner_argument": "approval"},
        },
        "code": ApprovalRequired.rpc_code,
    }
    exc = ApprovalRequired(message, data=data)
    exc.approval = a
    return exc


def refused(tool: Tool, approval_id: str, why: str) -> ApprovalRefused:
    reason = f"approval_{why}"
    return ApprovalRefused(
        f"this call of {tool.name} {_WHY.get(why, 'cannot use that approval')}; nothing was run. "
        "Call again without it to ask for a new approval.",
        reason=reason,
        data={"approval_id": approval_id},
    )


def event_row(a: store.Approval, event: str, now: float) -> AuditRow:
    """An approval's event in the call history: the asker's row, nothing run, nothing charged."""
    return AuditRow(
        at=now,
        user_id=a.user_id,
        user_name=a.user_name,
        agent_id=a.agent_id,
        agent_name=a.agent_name,
        key_prefix=a.key_prefix,
        toolkit_id=a.toolkit_id,
        toolkit=a.toolkit,
        project=a.project,
        tool=a.tool,
        runner=None,
        outcome="blocked",
        reason=f"approval_{event}",
        duration_ms=0.0,
        bytes=0,
        fee=0,
        owner_call=False,
        detail=a.why or None,
    )


def expired(w: SyncReader, rows: Iterable[store.Approval]) -> int:
    """The audit rows of approvals that just expired (in the transaction that expired them)."""
    n = 0
    for a in rows:
        insert_call(w, event_row(a, "expired", a.decided_at or a.expires_at), None)
        n += 1
    return n
