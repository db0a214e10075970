"""`toolspoke eval`: score the search an agent gets on labelled queries.

Queries are JSONL: ``{"id", "query", "gold": ["toolkit/name", ...]}``. A gold string is
compared whole (toolkits and names may contain ``/``) against each result's keys: the
catalogue's own ``group/upstream_name`` (how the retrieval data sets label tools), the
toolkit slug with the upstream name, and the gateway's exact tool name.

``--from-usage`` takes the queries from the deployment's usage log instead (``search/usage``):
each logged search that led to a call, with the called tool as its one relevant result,
replayed against the current ranking as the operator (every toolkit; the caller's own scope
is not replayed). Misses have no known relevant tool, so they are counted, not scored.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from appliance.errors import InvalidParams
from appliance.gateway.runtime import Runtime
from appliance.gateway.searching import Ranking, search
from appliance.models import Tool
from appliance.search import metrics, usage
from appliance.search.text import MAX_QUERY_CHARS

# Logged searches that led to a call replayed by ``--from-usage``, newest first.
USAGE_QUERIES = 5_000


def read_queries(data: bytes) -> list[dict[str, Any]]:
    items = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise InvalidParams(f"line {number}: not valid JSON", field=f"line {number}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("query"), str):
            raise InvalidParams(f"line {number}: needs a string 'query'", field=f"line {number}")
        if (length := len(doc["query"])) > MAX_QUERY_CHARS:  # search would refuse it (search/text.py)
            raise InvalidParams(
                f"line {number}: query is {length} characters long; the limit is {MAX_QUERY_CHARS}",
                field=f"line {number}",
            )
        gold = doc.get("gold")
        if not isinstance(gold, list) or not gold or not all(isinstance(g, str) for g in gold):
            raise InvalidParams(
                f"line {number}: 'gold' must be a non-empty list of strings", field=f"line {number}"
            )
        items.append({"id": str(doc.get("id", number)), "query": doc["query"], "gold": gold})
    if not items:
        raise InvalidParams("the queries file has no queries", field="queries")
    return items


def _keys(tool: Tool) -> tuple[str, ...]:
    return (f"{tool.group}/{tool.upstream_name}", f"{tool.toolkit}/{tool.upstream_name}", tool.name)


def rows_by_key(ids: Sequence[int], tools: Iterable[Tool]) -> dict[str, int]:
    """Each gold key (``_keys``) of ``tools`` -> its tool's position in ``ids`` (a vector
    matrix's ids); the first tool in ``ids`` order keeps a key two tools share."""
    position = {int(t): i for i, t in enumerate(ids)}
    out: dict[str, int] = {}
    for tool in sorted((t for t in tools if t.id in position), key=lambda t: position[t.id]):
        for key in _keys(tool):
            out.setdefault(key, position[tool.id])
    return out


def _ranked(tools: list[Tool], gold: set[str]) -> list[str]:
    """Each result as the gold key it matches, else its primary key; distinct."""
    out = []
    for tool in tools:
        keys = _keys(tool)
        out.append(next((k for k in keys if k in gold), keys[0]))
    return metrics.dedupe(out)


async def evaluate(
    rt: Runtime,
    items: list[dict[str, Any]],
    *,
    limit: int = 100,
    toolkit: str | None = None,
    project: str | None = None,
    ranking: Ranking = "auto",
) -> dict[str, Any]:
    """Score ``ranking`` on ``items``; ``ranking`` in the summary is what actually served them
    (``lexical`` when the semantic pass could not run, with ``reasons`` counted)."""
    per_query = []
    latencies = []
    worst: list[dict[str, Any]] = []
    served: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for item in items:
        started = time.perf_counter()
        outcome = await search(
            rt, item["query"], toolkit=toolkit, project=project, limit=limit, max_limit=limit, ranking=ranking
        )
        latencies.append((time.perf_counter() - started) * 1000)
        tools = [r.tool for r in outcome.results]
        served[outcome.ranking] = served.get(outcome.ranking, 0) + 1
        if outcome.reason:
            reasons[outcome.reason] = reasons.get(outcome.reason, 0) + 1
        gold = set(item["gold"])
        scores = metrics.score_query(_ranked(tools, gold), gold)
        per_query.append(scores)
        if scores["MRR"] == 0.0:
            worst.append({"id": item["id"], "query": item["query"][:120]})
    avg = metrics.average(per_query)
    return {
        "queries": len(items),
        "ranking": max(served, key=lambda k: served[k]) if served else ranking,
        "served": served,
        "fallback_reasons": reasons,
        "recall@1": avg["R@1"],
        "recall@5": avg["R@5"],
        "recall@10": avg["R@10"],
        "ndcg@10": avg["nDCG@10"],
        "mrr": avg["MRR"],
        "latency_ms": metrics.latency_summary(latencies),
        "missed": worst[:20],
    }


async def evaluate_usage(rt: Runtime, *, limit: int = 100, ranking: Ranking = "auto") -> dict[str, Any]:
    """``evaluate`` on the usage log's searches that led to a call (the called tool relevant)."""

    def logged(r: Any) -> tuple[list[tuple[int, str, str]], int, int]:
        return usage.called_in(r, limit=USAGE_QUERIES), usage.count_in(r), usage.misses_count_in(r)

    async with rt.db.read() as conn:
        called, searches, misses = await conn.batch(logged)
    if not called:
        raise InvalidParams(
            f"the usage log holds no search that led to a call yet ({searches} logged, {misses} misses)",
            field="from_usage",
        )
    items = [{"id": f"usage/{i}", "query": q, "gold": [name]} for i, q, name in called]
    summary = await evaluate(rt, items, limit=limit, ranking=ranking)
    summary["usage"] = {"searches": searches, "called": len(called), "misses": misses}
    return summary
