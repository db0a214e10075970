"""Reading the audit log and the ledger: call history pages, balances, entries.

Pages go newest first and are cut by an opaque cursor (the last row's id), so rows written
while someone pages never shift a page or repeat a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.db import ReadConn, dumps
from appliance.errors import InvalidParams
from appliance.ledger.amounts import credits
from appliance.ledger.windows import rfc3339

OUTCOMES = ("ok", "upstream_error", "is_error", "blocked", "rate_limited", "quota", "invalid")
MAX_PAGE = 500
CURSOR_PREFIX = "c"


@dataclass(frozen=True)
class CallFilter:
    toolkit_id: int | None = None
    user_id: int | None = None
    agent_id: int | None = None
    since: float | None = None
    until: float | None = None
    outcome: str | None = None
    tool: str | None = None


def parse_cursor(raw: str | None) -> int | None:
    if raw is None or raw == "":
        return None
    if not raw.startswith(CURSOR_PREFIX) or not raw[1:].isdigit() or len(raw) > 20:
        raise InvalidParams("invalid cursor; pass back the 'next_cursor' of a previous page", field="cursor")
    return int(raw[1:])


def _row(row: Any) -> dict[str, Any]:
    return {
        "id": row["id"],
        "at": rfc3339(row["at"]),
        "user": row["user_name"],
        "user_id": row["user_id"],
        "agent_id": row["agent_id"],
        "agent": row["agent_name"],
        "key_prefix": row["key_prefix"],
        "toolkit": row["toolkit"],
        "project": row["project"],
        "tool": row["tool"],
        "runner": row["runner"],
        "outcome": row["outcome"],
        "reason": row["reason"],
        "duration_ms": row["duration_ms"],
        "bytes": row["bytes"],
        "fee": credits(row["fee_milli"]),
        "owner_call": bool(row["owner_call"]),
        "redacted": int(row["redacted"]),  # values replaced by [redacted] in the answer
        "detail": row["detail"],  # the data-flow guard's labels, tools and window, when it decided
        "code_run": row["code_run"],  # the script run that made it (use_code, run_code), or its own row
    }


async def calls(conn: ReadConn, f: CallFilter, *, limit: int, cursor: str | None) -> dict[str, Any]:
    if f.outcome is not None and f.outcome not in OUTCOMES:
        raise InvalidParams(f"'outcome' must be one of {', '.join(OUTCOMES)}", field="outcome")
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidParams(f"'limit' must be from 1 to {MAX_PAGE}", field="limit")
    where: list[str] = ["1 = 1"]
    params: list[Any] = []
    for column, value in (
        ("toolkit_id", f.toolkit_id),
        ("user_id", f.user_id),
        ("agent_id", f.agent_id),
        ("outcome", f.outcome),
        ("tool", f.tool),
    ):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if f.since is not None:
        where.append("at >= ?")
        params.append(f.since)
    if f.until is not None:
        where.append("at < ?")
        params.append(f.until)
    after = parse_cursor(cursor)
    if after is not None:
        where.append("id < ?")
        params.append(after)
    rows = await conn.all(
        f"SELECT * FROM audit_log WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?", [*params, limit + 1]
    )
    page = [_row(r) for r in rows[:limit]]
    more = len(rows) > limit
    return {"calls": page, "next_cursor": f"{CURSOR_PREFIX}{page[-1]['id']}" if more and page else None}


async def balance(conn: ReadConn, user_id: int) -> int:
    row = await conn.one(
        "SELECT coalesce(sum(amount_milli), 0) AS b FROM ledger_entries WHERE user_id = ?", (user_id,)
    )
    return int(row["b"])


async def entries(conn: ReadConn, user_id: int, *, limit: int = 50) -> list[dict[str, Any]]:
    rows = await conn.all(
        "SELECT * FROM ledger_entries WHERE user_id = ? ORDER BY id DESC LIMIT ?", (user_id, limit)
    )
    return [
        {
            "id": r["id"],
            "at": rfc3339(r["at"]),
            "kind": r["kind"],
            "amount": credits(r["amount_milli"]),
            "toolkit_id": r["toolkit_id"],
            "audit_id": r["audit_id"],
            "refers_to": r["refers_to"],
            "actor": r["actor"],
            "note": r["note"],
        }
        for r in rows
    ]


async def balances_of(conn: ReadConn, user_ids: list[int]) -> dict[int, int]:
    """These users' balances in millicredits (one without entries is absent: 0)."""
    rows = await conn.all(
        "SELECT user_id, sum(amount_milli) AS b FROM ledger_entries"
        " WHERE user_id IN (SELECT value FROM json_each(?)) GROUP BY user_id",
        (dumps(user_ids),),
    )
    return {int(r["user_id"]): int(r["b"]) for r in rows}


async def voided(conn: ReadConn, entry_ids: list[int]) -> set[int]:
    """Which of these charges a void already reverses."""
    if not entry_ids:
        return set()
    rows = await conn.all(
        "SELECT refers_to FROM ledger_entries WHERE refers_to IN (SELECT value FROM json_each(?))",
        (dumps(entry_ids),),
    )
    return {int(r["refers_to"]) for r in rows}
