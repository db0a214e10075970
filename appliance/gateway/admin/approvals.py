"""The approval queue (issue 20): calls waiting for a person's yes, listed, approved, denied.

One home for the console's queue page, ``/api/v1/approvals`` and ``toolspoke approvals``.
Who may decide one approval is what its rule said when the call asked (``approver``):

- ``owner`` (the default): the toolkit's owner, or an admin (a platform toolkit: admins);
- ``admin``: admins only;
- ``user``: also the user the calling agent acts for (a person approving their own agent).

The operator (the CLI without a key) may decide any. An agent's key never decides (a person
must), nor does a read-only key. Anyone else learns nothing of an approval: it answers as
absent, as a toolkit they cannot see does. A decision is one transaction: the state change
and its audit row (``approval_granted`` or ``approval_denied``) together.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from appliance.access import approvals as store
from appliance.access import policy
from appliance.errors import Conflict, InvalidParams, NotFound
from appliance.gateway import approvals
from appliance.gateway.admin.people import require_person
from appliance.ledger.amounts import credits
from appliance.ledger.store import insert_call
from appliance.models import Principal

if TYPE_CHECKING:  # the CLI imports these modules at start-up, the runtime only when it runs
    from appliance.gateway.runtime import Runtime

LISTED = 200
_STATES = {"open": store.OPEN, **{s: (s,) for s in store.STATES}}


def may_decide(actor: Principal, a: store.Approval, owner_id: int | None) -> bool:
    if actor.operator or (actor.is_admin and actor.agent_id is None):
        return True
    if actor.agent_id is not None or actor.anonymous or a.approver == "admin":
        return False
    if owner_id is not None and owner_id == actor.user_id:
        return True
    return a.approver == "user" and a.user_id == actor.user_id


def shown(a: store.Approval, *, decidable: bool) -> dict[str, Any]:
    """One approval as every face shows it (the arguments as canonical JSON text: escape it)."""
    return {
        "id": a.id,
        "state": a.state,
        "tool": a.tool,
        "kind": a.kind,
        "toolkit": a.toolkit,
        "project": a.project,
        "rule": a.rule,
        "why": a.why or None,  # the data-flow guard's reason, when it asked
        "approver": a.approver,
        "arguments": a.arguments,
        "fee": credits(a.fee_milli),
        "asked_by": {
            "user_id": a.user_id,
            "user": a.user_name,
            "agent_id": a.agent_id,
            "agent": a.agent_name,
            "key_prefix": a.key_prefix,
        },
        "created_at": approvals.when(a.created_at),
        "expires_at": approvals.when(a.expires_at),
        "decided_at": None if a.decided_at is None else approvals.when(a.decided_at),
        "decided_by": a.decided_by or None,
        "used_at": None if a.used_at is None else approvals.when(a.used_at),
        "url": approvals.url_of(a.id),
        "may_decide": decidable,
    }


async def list_approvals(rt: Runtime, actor: Principal, *, state: Any = None) -> dict[str, Any]:
    """The approvals the actor may decide (or has asked for), newest first: the open ones
    (pending and approved, not yet used), or those in one ``state``."""
    require_person(actor)
    wanted = "open" if state in (None, "") else state
    if wanted not in _STATES:
        raise InvalidParams(f"'state' must be one of {', '.join(_STATES)}", field="state")
    await expire(rt)  # overdue ones are shown, and audited, as expired
    everyone = actor.operator or actor.is_admin
    async with rt.db.read() as conn:
        rows = await store.listed(
            conn, states=_STATES[wanted], owner_or_asker=None if everyone else actor.user_id, limit=LISTED
        )
    out = []
    for a, owner_id in rows:
        decidable = may_decide(actor, a, owner_id)
        # a user sees their own agents' calls too, whether or not the rule lets them decide
        if decidable or a.user_id == actor.user_id:
            out.append(shown(a, decidable=decidable and a.state == "pending"))
    return {"approvals": out, "state": wanted}


async def expire(rt: Runtime) -> int:
    """Overdue approvals become ``expired``, each with its audit row; how many."""
    now = time.time()
    n: int = await rt.db.writing(lambda w: approvals.expired(w, store.sweep(w, now)))
    approvals.counted(n)
    return n


async def decide(rt: Runtime, actor: Principal, approval_id: Any, *, approve: bool) -> dict[str, Any]:
    """Approve or deny one pending approval; the approval as it now is."""
    require_person(actor)
    policy.require_unguarded(actor, "decide approvals")
    if not isinstance(approval_id, str) or not approval_id or len(approval_id) > 64:
        raise InvalidParams("'id' must be an approval id", field="id")
    now = time.time()
    by = "operator" if actor.operator else actor.name

    event = "granted" if approve else "denied"

    def work(w: Any) -> tuple[bool, store.Approval | None, int]:
        gone = approvals.expired(w, store.sweep(w, now))
        found = store.get(w, approval_id)
        if found is None or not may_decide(actor, found, store.owner_of(w, found.toolkit_id)):
            return False, None, gone
        if found.state != "pending":
            return False, found, gone
        decided = store.decide(w, approval_id, approve, by, now)
        assert decided is not None  # pending, in this transaction
        insert_call(w, approvals.event_row(decided, event, now), None)
        return True, decided, gone

    changed, found, gone = await rt.db.writing(work)
    approvals.counted(gone)
    if found is None:
        raise NotFound(f"no approval {approval_id!r} you may decide", field="id")
    if not changed:
        raise Conflict(f"approval {approval_id} is {found.state}, not pending: nothing changed", field="id")
    approvals.counted(**{event: 1})
    return shown(found, decidable=False)
