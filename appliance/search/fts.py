"""The lexical index: keeping ``tools_fts`` in step with tools, and ranking tools for a query.

Ranking is FTS5's ``bm25()`` over four weighted columns (name, toolkit, description, params)
with the query turned into quoted, OR-ed tokens by ``text.match_expression``. One thing BM25
cannot promise is that a caller who types a tool's exact name gets that tool first (a
neighbour whose description repeats the words can outscore it), so a fifth column, ``exact``,
holds one opaque token per name form (full name, action part, upstream name; lower-cased and
hashed). The token for the typed text is looked up in the same statement; a hit is placed
first. Hashing keeps those tokens out of the way of ordinary words, and an FTS lookup avoids a
scan of ``tools`` for a case-insensitive match.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from appliance.db.connection import ReadConn, SyncReader, WriteTx
from appliance.db.scope_sql import tool_clause
from appliance.models import Scope
from appliance.search.text import action_of, index_text, query_tokens, quote

# Column weights for bm25(): name, toolkit, description, params, exact. Names and toolkit
# names are short and chosen by people to say what the tool does; measured on the bench dev
# queries, (3, 2, 1, 1) beat equal weights on three of four sets and lost on none by more
# than 0.002 nDCG@10. The exact column scores nothing; its hits are placed first explicitly.
WEIGHTS = (3.0, 2.0, 1.0, 1.0, 0.0)
_BM25 = "bm25(f.tools_fts, " + ", ".join(str(w) for w in WEIGHTS) + ")"
# Most rows the ranked query may touch, summed over its tokens' document frequencies. FTS5
# scores every matching row (about 2 us each, plus a pass over each token's whole doclist to
# count it), so "list" in a 100k-tool catalogue (20k rows) alone costs ~40 ms. Tokens are
# therefore taken rarest first while their frequencies fit this budget; the common ones left
# out carry little IDF anyway. At 1,000, nDCG@10 on the bench sets moves by <= 0.004 (ToolBench
# 0.709 -> 0.705, the others unchanged), and 100k tools answer in a few ms
# (tests/bench/search_latency.py); 1,500 was ~1.5 ms slower at 10k tools.
ROW_BUDGET = 1000
# A query longer than any tool name cannot be one; skip the exact lookup.
_MAX_NAME_CHARS = 256


@dataclass(frozen=True)
class IndexRow:
    """What the index needs to know about one tool."""

    tool_id: int
    name: str  # <toolkit slug>__<action>
    toolkit: str  # toolkit slug
    group: str  # OpenAPI tag or catalogue toolkit name
    description: str
    input_schema: dict[str, Any] | str  # JSON Schema, decoded or as stored
    upstream_name: str = ""


def exact_token(text: str) -> str:
    """The opaque token standing for one name form: ``x`` + 16 hex digits of its lower-case hash."""
    digest = hashlib.blake2b(text.strip().lower().encode("utf-8", "replace"), digest_size=8)
    return "x" + digest.hexdigest()


def _exact_column(row: IndexRow) -> str:
    forms = (row.name, action_of(row.name), row.upstream_name)
    return " ".join(dict.fromkeys(exact_token(f) for f in forms if f.strip()))


def _schema(value: dict[str, Any] | str) -> Any:
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return {}
    return value


async def index_tools(tx: WriteTx, rows: list[IndexRow]) -> None:
    """(Re)index tools: rowid = tool id; a tool indexed before is replaced."""
    if not rows:
        return
    await unindex(tx, [r.tool_id for r in rows])
    values = []
    for r in rows:
        cols = index_text(
            r.name, r.toolkit, r.group, r.description, _schema(r.input_schema), upstream_name=r.upstream_name
        )
        values.append((r.tool_id, *cols, _exact_column(r)))
    await tx.run_many(
        "INSERT INTO tools_fts (rowid, name, toolkit, description, params, exact) VALUES (?, ?, ?, ?, ?, ?)",
        values,
    )


async def optimize(tx: WriteTx) -> None:
    """Merge the index into one segment after a batch of changes.

    Every insert transaction adds an FTS5 segment, and a query walks each segment's b-tree:
    on a 10,000-tool catalogue built in 27 batches a ranked query took 1.36 ms at the median,
    0.81 ms once merged. Merging costs ~30 ms per 10,000 tools, so imports pay it once.
    """
    await tx.run("INSERT INTO tools_fts (tools_fts) VALUES ('optimize')")


async def unindex(tx: WriteTx, tool_ids: Sequence[int]) -> None:
    """Remove tools from the index; ids that are not there are ignored."""
    await tx.run_many("DELETE FROM tools_fts WHERE rowid = ?", [(int(i),) for i in tool_ids])


async def search(
    conn: ReadConn,
    query: str,
    *,
    limit: int,
    toolkit: str | None = None,
    project: str | None = None,
    allowed_toolkit_ids: Collection[int] | None = None,
    scope: Scope | None = None,
) -> list[tuple[int, float]]:
    """``search_in`` in one hop to the connection's thread."""
    return await conn.batch(
        lambda r: search_in(
            r,
            query,
            limit=limit,
            toolkit=toolkit,
            project=project,
            allowed_toolkit_ids=allowed_toolkit_ids,
            scope=scope,
        )
    )


def search_in(
    conn: SyncReader,
    query: str,
    *,
    limit: int,
    toolkit: str | None = None,
    project: str | None = None,
    allowed_toolkit_ids: Collection[int] | None = None,
    scope: Scope | None = None,
) -> list[tuple[int, float]]:
    """Tools matching ``query``, best first, as (tool id, score); higher scores are better.

    ``toolkit`` and ``project`` are slugs; ``allowed_toolkit_ids`` (when given) is the set of
    toolkits the caller may see, ``scope`` the caller's whole access filter (applied in the
    statement's WHERE, so a page is never short of what the caller may see). A tool whose name,
    action part or upstream name equals the trimmed query (case-insensitively) comes first.
    Text with nothing searchable in it returns an empty list, never an error.
    """
    if limit <= 0 or (allowed_toolkit_ids is not None and not allowed_toolkit_ids):
        return []
    if scope is not None and scope.toolkits is not None and not scope.toolkits:
        return []
    trimmed = query.strip()
    exact = quote(exact_token(trimmed)) if trimmed and len(trimmed) <= _MAX_NAME_CHARS else None
    expr = _affordable(conn, query_tokens(query))
    if expr is None and exact is None:
        return []
    filters, params = _filters(toolkit, project, allowed_toolkit_ids, scope)
    parts: list[str] = []
    args: list[Any] = []
    if exact is not None:
        # At most a handful of rows share a name form (one per toolkit that reuses an action).
        parts.append(_select(filters, ranked=False))
        args += [f"exact : {exact}", *params, 8]
    if expr is not None:
        parts.append(_select(filters, ranked=True))
        args += [expr, *params, limit]
    sql = " UNION ALL ".join(f"SELECT * FROM ({p})" for p in parts)
    rows = conn.all(sql, args)
    return _merge(rows, limit)


def _affordable(conn: SyncReader, tokens: list[str]) -> str | None:
    """The ranked arm's MATCH expression: the query tokens that fit ``ROW_BUDGET``, OR-ed.

    Each token's document frequency is counted up to the budget (a bounded walk of its
    doclist), then tokens are taken rarest first while they fit; tokens that match nothing are
    dropped. Small catalogues are probed too: fewer rows to score pays for the probe. When
    even the rarest token is over budget ("list users" over 100k tools), the two rarest are
    AND-ed: their intersection is small and is what such a query means.

    Counts are remembered in the reader's memo until the database changes, so a token is
    counted once per catalogue version rather than once per query.
    """
    if len(tokens) <= 1:
        return quote(tokens[0]) if tokens else None
    known: dict[str, int] = conn.memo.setdefault("fts_token_counts", {})
    if len(known) > 50_000:  # bound the memo on a long-lived reader
        known.clear()
    missing = [t for t in dict.fromkeys(tokens) if t not in known]
    if missing:
        limit = ROW_BUDGET + 1
        count = f"(SELECT count(*) FROM (SELECT 1 FROM tools_fts WHERE tools_fts MATCH ? LIMIT {limit}))"
        probe = " UNION ALL ".join(f"SELECT {i}, {count}" for i in range(len(missing)))
        for i, n in conn.all(probe, [quote(t) for t in missing]):
            known[missing[int(i)]] = int(n)
    counts = {i: known.get(t, 0) for i, t in enumerate(tokens)}
    rarest = sorted((i for i in counts if counts[i]), key=lambda i: (counts[i], i))
    if not rarest:
        return None
    if counts[rarest[0]] > ROW_BUDGET and len(rarest) >= 2:
        return f"{quote(tokens[rarest[0]])} AND {quote(tokens[rarest[1]])}"
    kept: list[int] = []
    total = 0
    for i in rarest:
        if kept and total + counts[i] > ROW_BUDGET:
            break
        kept.append(i)
        total += counts[i]
    return " OR ".join(quote(tokens[i]) for i in sorted(kept))


def _filters(
    toolkit: str | None,
    project: str | None,
    allowed_toolkit_ids: Collection[int] | None,
    scope: Scope | None = None,
) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if toolkit is not None:
        clauses.append("k.slug = ?")
        params.append(toolkit)
    if project is not None:
        clauses.append("k.project_id = (SELECT id FROM projects WHERE slug = ?)")
        params.append(project)
    if allowed_toolkit_ids is not None:
        clauses.append("t.toolkit_id IN (SELECT value FROM json_each(?))")
        params.append(orjson.dumps(sorted(int(i) for i in allowed_toolkit_ids)).decode())
    if scope is not None:
        sql, scope_params = tool_clause(scope, "t")
        if sql:
            clauses.append(sql)
            params += scope_params
    return " AND ".join(clauses), params


def _select(filters: str, *, ranked: bool) -> str:
    """One arm of the statement: exact-name hits (kind 0) or bm25-ranked hits (kind 1).

    With filters the tools and toolkits rows are joined by primary key for each hit.
    """
    kind = 1 if ranked else 0
    # bm25() in ORDER BY measured ~2x faster than FTS5's rank column with a rank MATCH.
    rank = _BM25 if ranked else "0.0"
    order = " ORDER BY rank" if ranked else ""
    join = ""
    where = ""
    if filters:
        join = " JOIN tools t ON t.id = f.rowid"
        if "k.slug" in filters or "k.project_id" in filters:  # only a slug or project filter reads it
            join += " JOIN toolkits k ON k.id = t.toolkit_id"
        where = f" AND {filters}"
    return (
        f"SELECT {kind} AS kind, f.rowid AS id, {rank} AS rank FROM tools_fts f{join}"
        f" WHERE f.tools_fts MATCH ?{where}{order} LIMIT ?"
    )


def _merge(rows: list[Any], limit: int) -> list[tuple[int, float]]:
    """Exact-name hits first (scored just above the best bm25 hit), then bm25 order."""
    exact = [int(r[1]) for r in rows if r[0] == 0]
    ranked = [(int(r[1]), -float(r[2])) for r in rows if r[0] == 1]
    top = max((s for _, s in ranked), default=0.0) + 1.0
    out = [(tool_id, top) for tool_id in sorted(exact)]
    seen = set(exact)
    out += [(tool_id, score) for tool_id, score in ranked if tool_id not in seen]
    return out[:limit]
