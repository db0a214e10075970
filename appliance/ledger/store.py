"""The ledger's SQL: prices, usage in a window, balances, audit rows, charges, grants, voids.

The write functions run in the writer's thread inside one transaction (``SyncReader``), so
the book's group commit can put many calls' rows into one durable commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from appliance.db import SyncReader
from appliance.errors import Conflict, InvalidParams, NotFound


@dataclass(frozen=True)
class Price:
    toolkit_id: int
    fee: int  # millicredits per call
    daily: int  # ceiling: calls, or millicredits when unit == "credits"; 0 none
    monthly: int
    unit: str  # "calls" or "credits"
    owner_id: int | None  # None: the platform's (every admin owns it)
    customised: bool  # a row in toolkit_prices exists
    # Fees more specific than ``fee`` (issue 20): per kind, and per tool by full name.
    kinds: Mapping[str, int] = field(default_factory=dict)
    tools: Mapping[str, int] = field(default_factory=dict)

    def fee_for(self, tool: str, kind: str) -> int:
        """What one call of this tool costs: the most specific fee wins (the tool's, its
        kind's, the toolkit's, which is the default setting's when the toolkit has none)."""
        if not self.tools and not self.kinds:  # the common case: one fee for the toolkit
            return self.fee
        found = self.tools.get(tool)
        if found is None:
            found = self.kinds.get(kind)
        return self.fee if found is None else found


@dataclass
class AuditRow:
    at: float
    user_id: int | None
    user_name: str
    agent_id: int | None
    agent_name: str | None
    key_prefix: str
    toolkit_id: int | None
    toolkit: str | None
    project: str | None
    tool: str
    runner: str | None
    outcome: str
    reason: str | None
    duration_ms: float
    bytes: int
    fee: int
    owner_call: bool
    redacted: int = 0  # values replaced by [redacted] in what the caller got
    detail: str | None = None  # a decision's detail beside its reason (the data-flow guard's)
    code_run: str | None = None  # the script run (use_code, run_code) that made the call, or its own row

    def as_tuple(self) -> tuple[Any, ...]:
        return (
            self.at,
            self.user_id,
            self.user_name,
            self.agent_id,
            self.agent_name,
            self.key_prefix,
            self.toolkit_id,
            self.toolkit,
            self.project,
            self.tool,
            self.runner,
            self.outcome,
            self.reason,
            round(self.duration_ms, 3),
            self.bytes,
            self.fee,
            int(self.owner_call),
            self.redacted,
            self.detail,
            self.code_run,
        )


_AUDIT_INSERT = (
    "INSERT INTO audit_log (at, user_id, user_name, agent_id, agent_name, key_prefix, toolkit_id,"
    " toolkit, project, tool, runner, outcome, reason, duration_ms, bytes, fee_milli, owner_call, redacted,"
    " detail, code_run) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
)


def load_price(r: SyncReader, toolkit_id: int, default_fee: int) -> Price | None:
    row = r.one(
        "SELECT k.id, k.owner_id, p.fee_milli, p.daily_limit, p.monthly_limit, p.limit_unit"
        " FROM toolkits k LEFT JOIN toolkit_prices p ON p.toolkit_id = k.id WHERE k.id = ?",
        (toolkit_id,),
    )
    if row is None:
        return None
    customised = row["fee_milli"] is not None
    kinds: dict[str, int] = {}
    tools: dict[str, int] = {}
    for name, kind, fee in r.all(
        "SELECT tool_name, kind, fee_milli FROM toolkit_fees WHERE toolkit_id = ?", (toolkit_id,)
    ):
        if name:
            tools[name] = int(fee)
        else:
            kinds[kind] = int(fee)
    return Price(
        toolkit_id=toolkit_id,
        fee=int(row["fee_milli"]) if customised else default_fee,
        daily=int(row["daily_limit"] or 0),
        monthly=int(row["monthly_limit"] or 0),
        unit=row["limit_unit"] or "calls",
        owner_id=None if row["owner_id"] is None else int(row["owner_id"]),
        customised=customised,
        kinds=kinds,
        tools=tools,
    )


def window_usage(r: SyncReader, toolkit_id: int, start: float, end: float) -> tuple[int, int]:
    """(calls, millicredits) charged in [start, end), voided charges excluded."""
    row = r.one(
        "SELECT count(*) AS calls, coalesce(-sum(c.amount_milli), 0) AS milli FROM ledger_entries c"
        " WHERE c.kind = 'charge' AND c.toolkit_id = ? AND c.at >= ? AND c.at < ?"
        " AND NOT EXISTS (SELECT 1 FROM ledger_entries v WHERE v.refers_to = c.id)",
        (toolkit_id, start, end),
    )
    return int(row["calls"]), int(row["milli"])


def key_spent(r: SyncReader, prefix: str) -> int:
    """Millicredits charged to calls made with this key (a charge's actor), voids excluded."""
    row = r.one(
        "SELECT coalesce(-sum(c.amount_milli), 0) AS milli FROM ledger_entries c"
        " WHERE c.kind = 'charge' AND c.actor = ?"
        " AND NOT EXISTS (SELECT 1 FROM ledger_entries v WHERE v.refers_to = c.id)",
        (prefix,),
    )
    return int(row["milli"])


def balance(r: SyncReader, user_id: int) -> int:
    row = r.one(
        "SELECT coalesce(sum(amount_milli), 0) AS b FROM ledger_entries WHERE user_id = ?", (user_id,)
    )
    return int(row["b"])


def insert_call(r: SyncReader, row: AuditRow, payer: int | None) -> int:
    """The audit row and, when someone pays (even 0), its charge; returns the audit id."""
    audit_id = int(r.one(_AUDIT_INSERT, row.as_tuple())[0])
    if payer is not None:
        r.one(
            "INSERT INTO ledger_entries (at, user_id, kind, amount_milli, toolkit_id, audit_id, actor)"
            " VALUES (?, ?, 'charge', ?, ?, ?, ?) RETURNING id",
            (row.at, payer, -row.fee, row.toolkit_id, audit_id, row.key_prefix),
        )
    return audit_id


def insert_grant(r: SyncReader, at: float, user_id: int, amount: int, actor: str, note: str) -> int:
    return int(
        r.one(
            "INSERT INTO ledger_entries (at, user_id, kind, amount_milli, actor, note)"
            " VALUES (?, ?, 'grant', ?, ?, ?) RETURNING id",
            (at, user_id, amount, actor, note),
        )[0]
    )


def insert_void(r: SyncReader, at: float, entry_id: int, actor: str, note: str) -> dict[str, Any]:
    """Reverse one charge with a compensating entry; a charge is voided at most once."""
    charge = r.one("SELECT * FROM ledger_entries WHERE id = ?", (entry_id,))
    if charge is None or charge["kind"] != "charge":
        raise NotFound(f"no charge with id {entry_id}", field="entry")
    if r.one("SELECT 1 FROM ledger_entries WHERE refers_to = ?", (entry_id,)):
        raise Conflict(f"charge {entry_id} is already voided", field="entry")
    void_id = int(
        r.one(
            "INSERT INTO ledger_entries (at, user_id, kind, amount_milli, toolkit_id, refers_to, actor, note)"
            " VALUES (?, ?, 'void', ?, ?, ?, ?, ?) RETURNING id",
            (at, charge["user_id"], -charge["amount_milli"], charge["toolkit_id"], entry_id, actor, note),
        )[0]
    )
    return {"id": void_id, "user_id": int(charge["user_id"]), "amount_milli": -int(charge["amount_milli"])}


def upsert_price(
    r: SyncReader, at: float, toolkit_id: int, fee: int, daily: int, monthly: int, unit: str
) -> None:
    if unit not in ("calls", "credits"):
        raise InvalidParams("'unit' must be 'calls' or 'credits'", field="unit")
    r.one(
        "INSERT INTO toolkit_prices"
        " (toolkit_id, fee_milli, daily_limit, monthly_limit, limit_unit, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (toolkit_id) DO UPDATE SET fee_milli = excluded.fee_milli,"
        " daily_limit = excluded.daily_limit, monthly_limit = excluded.monthly_limit,"
        " limit_unit = excluded.limit_unit, updated_at = excluded.updated_at RETURNING toolkit_id",
        (toolkit_id, fee, daily, monthly, unit, at),
    )


def set_fees(
    r: SyncReader, toolkit_id: int, kinds: Mapping[str, int | None], tools: Mapping[str, int | None]
) -> None:
    """Set (or, None, remove) fees per kind and per tool (full names); the rest stay."""
    for level, changes in (("kind", kinds), ("tool", tools)):
        for key, fee in changes.items():
            name, kind = (key, "") if level == "tool" else ("", key)
            if fee is None:
                r.all(
                    "DELETE FROM toolkit_fees WHERE toolkit_id = ? AND tool_name = ? AND kind = ?"
                    " RETURNING toolkit_id",
                    (toolkit_id, name, kind),
                )
            else:
                r.one(
                    "INSERT INTO toolkit_fees (toolkit_id, tool_name, kind, fee_milli) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (toolkit_id, tool_name, kind) DO UPDATE SET fee_milli = excluded.fee_milli"
                    " RETURNING toolkit_id",
                    (toolkit_id, name, kind, fee),
                )


def prune_audit(r: SyncReader, before: float, batch: int = 5000) -> int:
    """Delete up to ``batch`` audit rows older than ``before`` (short transactions)."""
    rows = r.all(
        "DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE at < ? ORDER BY id LIMIT ?)"
        " RETURNING id",
        (before, batch),
    )
    return len(rows)
