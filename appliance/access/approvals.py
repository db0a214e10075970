"""Approvals (issue 20): a person's yes, bound to exactly one call. Migration 0022's table.

An approval covers one call and nothing else: the principal that asked (``agent:<id>``,
``user:<id>`` or ``operator``, as idempotency keys are scoped), the tool, the SHA-256 of the
arguments' canonical JSON (``canonical``: keys sorted, no whitespace, integral numbers
written as integers, so two spellings of one call are one call and any change of value is
another) and the call policy's version when it was asked (a change of policy voids it),
until it expires. It is used once.

    pending ──approve──→ approved ──the call runs──→ used
       │                    │
       └──deny──→ denied    └──(past expires_at)──→ expired   (pending too)

``consume`` is the one way an approved call gets to run: it checks the binding and moves the
row to ``used`` inside one write transaction (``BEGIN IMMEDIATE``: writers are serialised),
so of two concurrent retries exactly one runs. ``open_for`` reuses the open approval of a
call asked again, so asking twice makes no second one. Expiry is lazy: ``sweep`` moves
overdue rows to ``expired`` in whichever write looks next, and returns them for the audit.
Who may approve (the rule's ``approver``) is decided in ``gateway/admin/approvals.py``.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

import orjson

from appliance.db import ReadConn, SyncReader

STATES = ("pending", "approved", "denied", "used", "expired")
OPEN = ("pending", "approved")
_COLUMNS = (
    "id, principal, user_id, user_name, agent_id, agent_name, key_prefix, toolkit_id, toolkit, project,"
    " tool, kind, arguments, args_hash, policy_version, rule, approver, fee_milli, idempotency_key, state,"
    " created_at, expires_at, decided_at, decided_by, used_at, why"
)
_SAFE_INT = 2**53  # integral floats beyond this are not exact integers: left as they are


def _plain(value: Any) -> Any:
    """``1.0`` and ``1`` are one number in JSON (RFC 8785 writes both as ``1``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < _SAFE_INT:
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def canonical(arguments: dict[str, Any]) -> str:
    """The arguments' canonical JSON: what an approver reads and what the hash binds."""
    return orjson.dumps(_plain(arguments), option=orjson.OPT_SORT_KEYS).decode()


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def new_id() -> str:
    return "apr_" + secrets.token_urlsafe(16)


@dataclass(frozen=True, slots=True)
class Binding:
    """What one approval is for, as the call asking (or retrying) presents it."""

    principal: str
    tool: str
    args_hash: str
    policy_version: int


@dataclass(frozen=True, slots=True)
class Approval:
    id: str
    principal: str
    user_id: int | None
    user_name: str
    agent_id: int | None
    agent_name: str | None
    key_prefix: str
    toolkit_id: int
    toolkit: str
    project: str
    tool: str
    kind: str
    arguments: str
    args_hash: str
    policy_version: int
    rule: str
    approver: str
    fee_milli: int
    idempotency_key: str | None
    state: str
    created_at: float
    expires_at: float
    decided_at: float | None
    decided_by: str
    used_at: float | None
    why: str = ""  # the data-flow guard's reason when it asked (migration 0025); "" for a rule

    def bound_to(self, b: Binding) -> bool:
        return (self.principal, self.tool, self.args_hash, self.policy_version) == (
            b.principal,
            b.tool,
            b.args_hash,
            b.policy_version,
        )


def _row(row: Any) -> Approval:
    return Approval(*tuple(row))


def sweep(w: SyncReader, now: float) -> list[Approval]:
    """Open approvals past their expiry become ``expired``; the rows moved, for the audit."""
    rows = w.all(
        f"UPDATE approvals SET state = 'expired', decided_at = ? WHERE state IN ('pending', 'approved')"
        f" AND expires_at <= ? RETURNING {_COLUMNS}",
        (now, now),
    )
    return [_row(r) for r in rows]


def open_for(w: SyncReader, b: Binding) -> Approval | None:
    """The open (pending or approved, not expired: ``sweep`` first) approval of this call."""
    row = w.one(
        f"SELECT {_COLUMNS} FROM approvals WHERE principal = ? AND tool = ? AND args_hash = ?"
        " AND policy_version = ? AND state IN ('pending', 'approved')",
        (b.principal, b.tool, b.args_hash, b.policy_version),
    )
    return None if row is None else _row(row)


def insert(w: SyncReader, a: Approval) -> None:
    w.one(
        f"INSERT INTO approvals ({_COLUMNS}) VALUES ({', '.join('?' * 26)}) RETURNING id",
        (
            a.id,
            a.principal,
            a.user_id,
            a.user_name,
            a.agent_id,
            a.agent_name,
            a.key_prefix,
            a.toolkit_id,
            a.toolkit,
            a.project,
            a.tool,
            a.kind,
            a.arguments,
            a.args_hash,
            a.policy_version,
            a.rule,
            a.approver,
            a.fee_milli,
            a.idempotency_key,
            a.state,
            a.created_at,
            a.expires_at,
            a.decided_at,
            a.decided_by,
            a.used_at,
            a.why,
        ),
    )


def get(r: SyncReader, approval_id: str) -> Approval | None:
    row = r.one(f"SELECT {_COLUMNS} FROM approvals WHERE id = ?", (approval_id,))
    return None if row is None else _row(row)


def verdict(found: Approval | None, b: Binding) -> str:
    """Why a retry naming ``found`` may not run (``ok``: it may), checked in this order: an
    approval that is not the caller's is unknown to them (no oracle for another's ids)."""
    if found is None or found.principal != b.principal:
        return "unknown"
    if found.state != "approved":
        return found.state  # pending, denied, used, expired
    if (found.tool, found.args_hash) != (b.tool, b.args_hash):
        return "mismatch"
    if found.policy_version != b.policy_version:
        return "stale"
    return "ok"


def consume(w: SyncReader, approval_id: str, b: Binding, now: float) -> tuple[str, Approval | None]:
    """Use the approval for this call, in the caller's write transaction: (``ok``, the row
    now ``used``) or (why not, the row as found). Overdue rows must be swept first."""
    found = get(w, approval_id)
    why = verdict(found, b)
    if why != "ok":
        return why, found
    used = w.one(
        f"UPDATE approvals SET state = 'used', used_at = ? WHERE id = ? AND state = 'approved'"
        f" RETURNING {_COLUMNS}",
        (now, approval_id),
    )
    return ("ok", _row(used)) if used is not None else ("used", found)


def restore(w: SyncReader, approval_id: str, now: float) -> bool:
    """A used approval whose call was refused before anything was sent is approved again
    (while it has not expired): the call it covers never ran."""
    moved = w.one(
        "UPDATE approvals SET state = 'approved', used_at = NULL WHERE id = ? AND state = 'used'"
        " AND expires_at > ? RETURNING id",
        (approval_id, now),
    )
    return moved is not None


def decide(w: SyncReader, approval_id: str, approve: bool, by: str, now: float) -> Approval | None:
    """A pending approval approved or denied (None: it was not pending)."""
    row = w.one(
        f"UPDATE approvals SET state = ?, decided_at = ?, decided_by = ? WHERE id = ? AND state = 'pending'"
        f" RETURNING {_COLUMNS}",
        ("approved" if approve else "denied", now, by[:128], approval_id),
    )
    return None if row is None else _row(row)


async def listed(
    conn: ReadConn, *, states: tuple[str, ...], owner_or_asker: int | None, limit: int
) -> list[tuple[Approval, int | None]]:
    """Approvals in ``states``, newest first, each with its toolkit's owner id: all of them
    (``owner_or_asker`` None), or those of the toolkits that user owns and those asked for
    that user (whether they may decide each is the caller's rule)."""
    marks = ", ".join("?" * len(states))
    where, params = f"a.state IN ({marks})", list[Any](states)
    if owner_or_asker is not None:
        where += " AND (k.owner_id = ? OR a.user_id = ?)"
        params += [owner_or_asker, owner_or_asker]
    cols = ", ".join(f"a.{c.strip()}" for c in _COLUMNS.split(","))
    rows = await conn.all(
        f"SELECT {cols}, k.owner_id FROM approvals a JOIN toolkits k ON k.id = a.toolkit_id WHERE {where}"
        " ORDER BY a.created_at DESC, a.id LIMIT ?",
        (*params, limit),
    )
    return [(_row(tuple(r)[:-1]), r[-1]) for r in rows]


def owner_of(r: SyncReader, toolkit_id: int) -> int | None:
    """The toolkit's owner (None: the platform's, every admin's)."""
    row = r.one("SELECT owner_id FROM toolkits WHERE id = ?", (toolkit_id,))
    return None if row is None or row[0] is None else int(row[0])
