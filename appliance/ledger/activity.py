"""The audit log summed up for the overview: calls per minute, outcomes, top tools, spend per
toolkit and per agent, over a recent window.

Every statement is a range over ``at`` (migration 18's covering index ``audit_overview``
holds every column these read, so a month of calls is summed from the index alone, never the
table). A viewer who is not an admin sees the rows of their own calls and of calls to their
toolkits only: ``Seen`` carries that, as the owner's id and their toolkit ids.
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


def spend_in(r: SyncReader, seen: Seen, since: float, recent: float) -> list[dict[str, Any]]:
    """Fees charged since ``since`` (and since ``recent``, a later start) per toolkit and
    caller (an agent, or a user's own key): one range over the index; grouping them by
    toolkit or by caller is the caller's."""
    where, params = _where(seen, since)
    rows = r.all(
        "SELECT toolkit_id, agent_id, user_id, sum(fee_milli) AS total,"
        " sum(CASE WHEN at >= ? THEN fee_milli ELSE 0 END) AS recent"
        f" FROM audit_log INDEXED BY audit_overview WHERE {where} AND fee_milli > 0"
        " GROUP BY toolkit_id, agent_id, user_id",
        [recent, *params],
    )
    return [
        {
            "toolkit_id": row[0],
            "agent_id": row[1],
            "user_id": row[2],
            "total_milli": int(row[3]),
            "recent_milli": int(row[4]),
        }
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
