"""The audit log summed up for the overview: calls per minute, outcomes, top tools, spend per
toolkit and per agent, over a recent window.

Every statement reads one of migration 18's covering indexes alone, never the table's rows:
the last hour and day are a range over ``audit_overview`` (led by the time); the 30 days of
spend a pass over ``audit_spend_by_toolkit`` or ``audit_spend_by_caller``, which hold the paid
rows only in the order of their groups, so summing them needs no sort. A viewer who is not
an admin sees the rows of their own calls and of calls to their toolkits only: ``Seen``
carries that, as the owner's id and their toolkit ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.db import SyncReader, dumps

ERRORS = ("upstream_error", "is_error")
REFUSALS = ("blocked", "rate_limited", "quota", "invalid")
TOP = 10


@dataclass(frozen=True)
class Seen:
    """Whose rows count: None for every row (an admin), else the user's calls and the calls
    to the toolkits they own."""

    user_id: int | None = None
    toolkit_ids: tuple[int, ...] = ()


def _where(seen: Seen, since: float) -> tuple[str, list[Any]]:
    if seen.user_id is None:
        return "at >= ?", [since]
    return (
        "at >= ? AND (user_id = ? OR toolkit_id IN (SELECT value FROM json_each(?)))",
        [since, seen.user_id, dumps(list(seen.toolkit_ids))],
    )


def per_minute_in(r: SyncReader, seen: Seen, since: float) -> dict[int, tuple[int, int, int]]:
    """Minute (unix seconds // 60) → (calls, errors, refusals), for the minutes that had any."""
    where, params = _where(seen, since)
    rows = r.all(
        "SELECT CAST(at / 60 AS INTEGER) AS minute, count(*) AS n,"
        f" sum(outcome IN {ERRORS!r}) AS errors, sum(outcome IN {REFUSALS!r}) AS refusals"
        f" FROM audit_log INDEXED BY audit_overview WHERE {where} GROUP BY minute",
        params,
    )
    return {int(row[0]): (int(row[1]), int(row[2]), int(row[3])) for row in rows}


def outcomes_in(r: SyncReader, seen: Seen, since: float) -> dict[str, int]:
    where, params = _where(seen, since)
    rows = r.all(
        f"SELECT outcome, count(*) FROM audit_log INDEXED BY audit_overview WHERE {where} GROUP BY outcome",
        params,
    )
    return {row[0]: int(row[1]) for row in rows}


def top_tools_in(r: SyncReader, seen: Seen, since: float, *, limit: int = TOP) -> list[dict[str, Any]]:
    """The most called tools since ``since``, with how many of their calls did not succeed."""
    where, params = _where(seen, since)
    rows = r.all(
        "SELECT toolkit_id, tool, count(*) AS n, sum(outcome != 'ok') AS not_ok"
        f" FROM audit_log INDEXED BY audit_overview WHERE {where}"
        " GROUP BY toolkit_id, tool ORDER BY n DESC, tool LIMIT ?",
        [*params, limit],
    )
    return [
        {"toolkit_id": row[0], "tool": row[1], "calls": int(row[2]), "not_ok": int(row[3])} for row in rows
    ]


def spend_by_toolkit_in(
    r: SyncReader, seen: Seen, since: float, recent: float, *, limit: int = TOP
) -> list[dict[str, Any]]:
    """The toolkits that charged most since ``since``: their fees since then and since
    ``recent`` (a later start), in millicredits."""
    return _spend(r, seen, since, recent, "audit_spend_by_toolkit", ("toolkit_id",), limit)


def spend_by_caller_in(
    r: SyncReader, seen: Seen, since: float, recent: float, *, limit: int = TOP
) -> list[dict[str, Any]]:
    """The callers (an agent, or a user's own key: agent_id None) charged most since ``since``."""
    return _spend(r, seen, since, recent, "audit_spend_by_caller", ("agent_id", "user_id"), limit)


def _spend(
    r: SyncReader, seen: Seen, since: float, recent: float, index: str, keys: tuple[str, ...], limit: int
) -> list[dict[str, Any]]:
    # The index holds paid rows only, ordered by the group: a pass without a sort.
    where, params = _where(seen, since)
    columns = ", ".join(keys)
    rows = r.all(
        f"SELECT {columns}, sum(fee_milli) AS total,"
        " sum(CASE WHEN at >= ? THEN fee_milli ELSE 0 END) AS recent"
        f" FROM audit_log INDEXED BY {index} WHERE {where} AND fee_milli > 0"
        f" GROUP BY {columns} ORDER BY total DESC, {columns} LIMIT ?",
        [recent, *params, limit],
    )
    return [
        {**{k: row[k] for k in keys}, "total_milli": int(row["total"]), "recent_milli": int(row["recent"])}
        for row in rows
    ]


def names_in(
    r: SyncReader, *, toolkits: list[int], agents: list[int], users: list[int]
) -> dict[str, dict[int, tuple[str, str]]]:
    """The names the latest audit row gives each id (history outlives a toolkit or an agent,
    so the log, not the catalogue, names them): toolkit → (slug, project), agent → (agent,
    user), user → (user, ""). One indexed lookup per id, for the few ids a page shows."""
    out: dict[str, dict[int, tuple[str, str]]] = {"toolkits": {}, "agents": {}, "users": {}}
    for kind, column, names, ids in (
        ("toolkits", "toolkit_id", "toolkit, project", toolkits),
        ("agents", "agent_id", "agent_name, user_name", agents),
        ("users", "user_id", "user_name, ''", users),
    ):
        for one in dict.fromkeys(ids):
            row = r.one(f"SELECT {names} FROM audit_log WHERE {column} = ? ORDER BY id DESC LIMIT 1", (one,))
            if row is not None:
                out[kind][int(one)] = (row[0] or "", row[1] or "")
    return out
