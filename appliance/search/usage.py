"""The search usage log: what agents did with their searches (migration 0021's ``search_usage``).

One row per search, written once its outcome is known: the result the same caller then called
and its rank, or a miss. The gateway decides outcomes in memory (``gateway/usage.py``) and
hands finished rows here in batches. Three readers: ``toolspoke eval --from-usage`` (the
searches that led to a call, the called tool taken as the relevant one), the console's recent
misses, and the optional boost (``observed_in``: how often each tool was called after a query
normalised the same way).

Query text is hostile: it is stored as given (cut to ``MAX_QUERY``), bound as a parameter,
never part of a statement, and shown escaped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from appliance.db import SyncReader, SyncWriter
from appliance.search.text import query_tokens

# Characters of a query kept (a search accepts 2,000; what identifies a need is far shorter).
MAX_QUERY = 500
# Names of a search's answer kept, best first: a call of a tool ranked lower counts as a miss.
MAX_RESULTS = 10
# Characters of a normalised query: distinct tokens, sorted (at most 48 tokens of 64 characters).
MAX_KEY = 1_000
# Rows the boost reads per query key, newest first: bounds its cost whatever one key's history.
OBSERVED_ROWS = 500


@dataclass
class Searched:
    """One search and, once known, its outcome."""

    at: float
    user_id: int | None
    agent_id: int | None
    principal: str
    query: str
    results: list[str]  # full tool names, best first
    called: str | None = None
    called_id: int | None = None
    rank: int | None = None
    key: str = ""  # ``normalised(query)`` of the whole query, before it is cut; "" to compute


def normalised(query: str) -> str:
    """The query as the boost counts it: its distinct search tokens (stop-words dropped, case,
    order and punctuation ignored), sorted. "List my pets!" and "pets: list" are one query."""
    return " ".join(sorted(set(query_tokens(query))))[:MAX_KEY]


def insert_in(w: SyncWriter, rows: Iterable[Searched]) -> int:
    """Add finished searches; the count written."""
    data = [
        (
            r.at,
            r.user_id,
            r.agent_id,
            r.principal,
            r.query[:MAX_QUERY],
            r.key or normalised(r.query),
            orjson.dumps(r.results[:MAX_RESULTS]).decode(),
            r.called,
            r.called_id,
            r.rank,
        )
        for r in rows
    ]
    w.run_many(
        "INSERT INTO search_usage (at, user_id, agent_id, principal, query, qkey, results, called,"
        " called_id, rank) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        data,
    )
    return len(data)


def prune_in(w: SyncWriter, *, before: float, keep: int) -> None:
    """Drop rows older than ``before`` and all but the newest ``keep`` (ids only grow: the
    newest row has the largest, so the cut is one range on the primary key)."""
    w.run("DELETE FROM search_usage WHERE at < ?", (before,))
    w.run("DELETE FROM search_usage WHERE id <= (SELECT max(id) FROM search_usage) - ?", (keep,))


def count_in(r: SyncReader) -> int:
    return int(r.one("SELECT count(*) FROM search_usage")[0])


def called_in(r: SyncReader, *, limit: int) -> list[tuple[int, str, str]]:
    """The newest searches that led to a call: (id, query, called tool name), oldest first."""
    rows = r.all(
        "SELECT id, query, called FROM search_usage WHERE rank IS NOT NULL ORDER BY id DESC LIMIT ?",
        (limit,),
    )
    return [(int(x[0]), str(x[1]), str(x[2])) for x in reversed(rows)]


def misses_count_in(r: SyncReader) -> int:
    return int(r.one("SELECT count(*) FROM search_usage WHERE rank IS NULL")[0])


def misses_in(r: SyncReader, *, user_id: int | None, limit: int) -> list[Searched]:
    """The newest misses, newest first: every caller's (``user_id`` None) or those of one
    user's own key and agents."""
    where, params = ("rank IS NULL", []) if user_id is None else ("rank IS NULL AND user_id = ?", [user_id])
    rows = r.all(
        "SELECT at, user_id, agent_id, principal, query, results FROM search_usage"
        f" WHERE {where} ORDER BY id DESC LIMIT ?",  # a fixed clause; values bound
        (*params, limit),
    )
    return [Searched(float(x[0]), x[1], x[2], str(x[3]), str(x[4]), list(orjson.loads(x[5]))) for x in rows]


def observed_in(r: SyncReader, query: str) -> tuple[int, dict[int, int]]:
    """For the boost: how many logged searches had this normalised query (hits and misses,
    newest ``OBSERVED_ROWS``), and how many of them led to a call of each tool (by id)."""
    key = normalised(query)
    if not key:
        return 0, {}
    rows = r.all(
        "SELECT called_id FROM search_usage WHERE qkey = ? ORDER BY id DESC LIMIT ?", (key, OBSERVED_ROWS)
    )
    counts: dict[int, int] = {}
    for (tool_id,) in rows:
        if tool_id is not None:
            counts[int(tool_id)] = counts.get(int(tool_id), 0) + 1
    return len(rows), counts
