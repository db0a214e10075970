"""Search as every caller gets it: the bridge's search_tools, the CLI and `eval`.

Lexical ranking always runs. The semantic pass joins it (``hybrid``) only when a provider is
configured, the run-time switch is on, the breaker is closed, and every toolkit the caller can
see in this search is embedded with the provider's model; otherwise the answer is lexical and
says so. A lexical-only search is one hop to a reader thread; a hybrid one is two hops (lexical +
decision; nearest neighbours + fusion + loading) with the query embedding in its own thread,
overlapping the first hop once this process has seen a search use the semantic pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal

from appliance.catalogue import store, toolkit_reads
from appliance.db import SyncReader
from appliance.errors import InvalidParams
from appliance.gateway import policy
from appliance.gateway.runtime import Runtime
from appliance.models import Principal, Scope, Tool
from appliance.search import adapter as query_adapter
from appliance.search import fts, hybrid, usage, vectors
from appliance.search.asks import asks_of
from appliance.search.text import MAX_QUERY_CHARS

Ranking = Literal["auto", "lexical", "semantic", "hybrid"]
Hits = list[tuple[int, float]]
SPARE = 8


@dataclass
class Explained:
    """One result with how it was ranked (``toolspoke search --explain``)."""

    tool: Tool
    score: float
    lexical_rank: int | None = None
    lexical_score: float | None = None
    semantic_rank: int | None = None
    semantic_score: float | None = None
    # a fused score's terms (search/hybrid.Fused): what the words, the meaning and the service gave
    lexical_part: float | None = None
    semantic_part: float | None = None
    service_part: float | None = None
    usage_part: float | None = None  # what the usage boost gave (None: off)
    ask_part: float | None = None  # what the request's asks gave (None: not split into asks)


@dataclass
class Outcome:
    results: list[Explained]
    ranking: str  # what served them: lexical | semantic | hybrid
    reason: str = ""  # why a semantic or hybrid request was answered lexically
    extra: dict[str, Any] = field(default_factory=dict)


def _visible_toolkits(
    reader: SyncReader, toolkit: str | None, project: str | None, allowed: Collection[int] | None
) -> set[int]:
    ids = toolkit_reads.ids_in(reader, toolkit, project)
    return ids if allowed is None else ids & {int(i) for i in allowed}


def check_query(text: str, field: str) -> None:
    """Refuse query text over ``MAX_QUERY_CHARS`` before any pass over it, naming the field."""
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidParams(
            f"{field.strip('/')} is {len(text)} characters long; the limit is {MAX_QUERY_CHARS} characters",
            field=field,
            data={"limit": MAX_QUERY_CHARS, "length": len(text)},
        )


async def search(
    rt: Runtime,
    query: str,
    *,
    toolkit: str | None = None,
    project: str | None = None,
    limit: int | None = None,
    max_limit: int | None = None,
    ranking: Ranking = "auto",
    principal: Principal | None = None,
    allowed_toolkit_ids: Collection[int] | None = None,
) -> Outcome:
    """Best tools for ``query`` among those ``principal`` may call, best first, with the ranking
    that served them. No principal: the operator's view (CLI without a key, eval).

    The caller's access scope filters both halves: the lexical statement carries it in its
    WHERE, nearest neighbours are masked to the scope's toolkits, and loading the tools applies
    it again (per-tool restrictions), so no ranking can show a tool the caller may not see.
    ``allowed_toolkit_ids`` (``providers``) narrows further.

    ``ranking`` other than ``auto`` is for `toolspoke eval`: ``lexical``
    skips the semantic pass; ``semantic`` ranks by cosine alone; ``hybrid`` fuses. Either of the
    last two still answers lexically (with a reason) when the semantic pass cannot run.
    ``max_limit`` lifts the agent-facing cap for `toolspoke eval`, which scores the top 100.
    """
    check_query(query, "query")  # every caller's backstop; faces check first, naming their field
    settings = rt.settings
    cap = max_limit or settings.search_max_limit
    n = max(1, min(limit or settings.search_default_limit, cap))
    sem = rt.semantic
    model_id = sem.model_id if ranking != "lexical" else None
    depth = max(n, hybrid.CANDIDATES) if model_id else n
    # A long request's asks are ranked too (search/asks.py), in hybrid rankings only: lexically
    # alone they helped ToolBench and cost the other three sets (docs/search.md, "Asks").
    asks = asks_of(query) if model_id and ranking != "semantic" else []
    # The query embedding (the longest step) runs beside the lexical pass rather than after it,
    # when this process's last search used the semantic pass; the lexical pass then decides.
    early = (
        asyncio.ensure_future(sem.query_vectors(query, asks)) if model_id and sem.expect_semantic() else None
    )

    def first(reader: SyncReader) -> tuple[list[Hits], str, set[int] | None, list[Tool], Scope | None]:
        # The caller's scope, ranking and loading share one hop to the reader's thread.
        # What could run (access narrowed by the call policy): search shows nothing else.
        scope = None if principal is None else policy.runnable_in(reader, rt, principal)

        def words(text: str, limit: int) -> Hits:
            return fts.search_in(
                reader,
                text,
                limit=limit,
                toolkit=toolkit,
                project=project,
                allowed_toolkit_ids=allowed_toolkit_ids,
                scope=scope,
            )

        lexical = words(query, depth)
        reason = _why_not_semantic(reader, model_id, settings.semantic_search, ranking)
        visible: set[int] | None = None
        if not reason and model_id is not None:
            allowed = _narrowest(allowed_toolkit_ids, None if scope is None else scope.toolkits)
            visible = _visible_toolkits(reader, toolkit, project, allowed)
            if visible & vectors.unembedded_toolkits_in(reader, model_id):
                reason = "not_embedded"
        if reason or model_id is None:
            top = lexical[:n]
            return [top], reason, None, store.tools_by_ids_in(reader, [t for t, _ in top], scope=scope), scope
        return [lexical] + [words(a.text, hybrid.CANDIDATES) for a in asks], "", visible, [], scope

    try:
        async with rt.db.read() as conn:
            (lexical, *ask_lexical), reason, visible, tools, scope = await conn.batch(first)
    except BaseException:
        if early is not None:
            early.cancel()
        raise
    if model_id is not None:
        sem.note_decision(semantic=not reason and visible is not None)
    if model_id is None or reason or visible is None:
        if early is not None:
            early.cancel()  # a local embedding still finishes in its thread; its result is dropped
        return _lexical_outcome(rt, query, lexical, tools, reason if ranking != "lexical" else "")

    qvec, ask_vecs = await (early if early is not None else sem.query_vectors(query, asks))
    if qvec is None:
        async with rt.db.read() as conn:
            top = lexical[:n]
            tools = await conn.batch(lambda r: store.tools_by_ids_in(r, [t for t, _ in top], scope=scope))
        return _lexical_outcome(rt, query, top, tools, "provider_unavailable")

    boost = settings.search_usage_boost

    def second(reader: SyncReader) -> tuple[list[hybrid.Fused], list[Tool]]:
        # The query adapter (search/adapter.py: this deployment's learned one, else the shipped
        # one) moves the request's vectors, never the tools'.
        moved = query_adapter.for_search_in(reader, model_id, enabled=settings.search_query_adapter)
        vector, ask_vectors = (qvec, ask_vecs) if moved is None else moved.apply_all(qvec, ask_vecs)
        matrix = vectors.matrix_in(reader, model_id)
        near = [] if matrix is None else vectors.nearest(matrix, vector, k=depth, toolkit_ids=visible)
        # The matrix holds every embedded tool, whatever its state; a few spare candidates make
        # up for pending or disabled ones, which loading drops.
        spare = n + SPARE
        if ranking == "semantic":
            fused = [hybrid.Fused(t, s, None, None, i + 1, s) for i, (t, s) in enumerate(near[:spare])]
        else:
            pairs = (
                []
                if matrix is None
                else vectors.ask_lists(matrix, (lexical, near), ask_lexical, ask_vectors, k=hybrid.CANDIDATES)
            )
            ids = [t for hits in (lexical, near, *(h for pair in pairs for h in pair)) for t, _ in hits]
            kits = {} if matrix is None else vectors.groups_of(matrix, ids)
            # The optional usage boost (search/hybrid.py): calls logged after this query.
            used = hybrid.usage_prior(*usage.observed_in(reader, query)) if boost else None
            fused = hybrid.rank(lexical, near, pairs, limit=spare, toolkit_of=kits, usage=used)
        return fused, store.tools_by_ids_in(reader, [f.tool_id for f in fused], scope=scope)

    async with rt.db.read() as conn:
        fused, tools = await conn.batch(second)
    by_id = {t.id: t for t in tools}
    results = [
        Explained(
            by_id[f.tool_id],
            f.score,
            f.lexical_rank,
            f.lexical_score,
            f.semantic_rank,
            f.semantic_score,
            f.lexical_part,
            f.semantic_part,
            f.service_part,
            f.usage_part,
            f.ask_part,
        )
        for f in fused
        if f.tool_id in by_id
    ][:n]
    served = "semantic" if ranking == "semantic" else "hybrid"
    best = max((r.semantic_score for r in results if r.semantic_score is not None), default=None)
    sem.note_outcome(query, len(results), best, served)
    return Outcome(results, served)


def _narrowest(a: Collection[int] | None, b: Collection[int] | None) -> set[int] | None:
    if a is None:
        return None if b is None else set(b)
    return set(a) if b is None else set(a) & set(b)


def _why_not_semantic(reader: SyncReader, model_id: str | None, setting_on: bool, ranking: Ranking) -> str:
    if model_id is None:
        return "" if ranking in ("auto", "lexical") else "no_provider"
    on = vectors.semantic_on_in(reader, setting_on)
    # An explicit request (eval --ranking) ignores the switch; agents' searches (and
    # `search --explain`, which shows what they get) obey it.
    if not on and ranking == "auto":
        return "switched_off"
    return ""


def _lexical_outcome(
    rt: Runtime, query: str, hits: list[tuple[int, float]], tools: list[Tool], reason: str
) -> Outcome:
    score = dict(hits)
    rank = {tool_id: i + 1 for i, (tool_id, _) in enumerate(hits)}
    results = [Explained(t, score.get(t.id, 0.0), rank.get(t.id), score.get(t.id)) for t in tools]
    rt.semantic.note_outcome(query, len(results), None, "lexical")
    return Outcome(results, "lexical", reason)


async def search_tools(
    rt: Runtime,
    query: str,
    *,
    principal: Principal | None = None,
    toolkit: str | None = None,
    project: str | None = None,
    limit: int | None = None,
    max_limit: int | None = None,
    ranking: Ranking = "auto",
) -> tuple[list[Tool], str]:
    """Best tools for ``query`` that ``principal`` may call, best first, and the ranking's name."""
    outcome = await search(
        rt,
        query,
        principal=principal,
        toolkit=toolkit,
        project=project,
        limit=limit,
        max_limit=max_limit,
        ranking=ranking,
    )
    return [r.tool for r in outcome.results], outcome.ranking
