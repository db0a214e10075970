"""Retrieval metrics, exactly as the bench's reference evaluator defines them. Pure.

Per query (gold set G, ranked list L of distinct keys), then averaged over queries:
  R@k      |G ∩ L[:k]| / min(k, |G|)   capped recall; a multi-gold query can reach 1.0 at k = 1
  nDCG@10  binary gains, ideal DCG over min(|G|, 10) hits
  MRR      1 / rank of the first gold key within the top 100, else 0
Latency percentiles use linear interpolation between closest ranks, so p50 is the median
(what the reference reports as "median ms").
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence

RECALL_KS = (1, 5, 10)
NDCG_K = 10
MRR_DEPTH = 100
METRIC_NAMES = ("R@1", "R@5", "R@10", "nDCG@10", "MRR")


def dedupe(keys: Iterable[str]) -> list[str]:
    """The ranked list with repeats removed, first occurrence kept (L is a list of distinct keys)."""
    return list(dict.fromkeys(keys))


def recall_at(ranked: Sequence[str], gold: Collection[str], k: int) -> float:
    if not gold:
        return 0.0
    hits = len(set(gold) & set(ranked[:k]))
    return hits / min(k, len(set(gold)))


def ndcg_at(ranked: Sequence[str], gold: Collection[str], k: int = NDCG_K) -> float:
    goldset = set(gold)
    if not goldset:
        return 0.0
    dcg = sum(1 / math.log2(i + 2) for i, key in enumerate(ranked[:k]) if key in goldset)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(goldset), k)))
    return dcg / ideal


def reciprocal_rank(ranked: Sequence[str], gold: Collection[str], depth: int = MRR_DEPTH) -> float:
    goldset = set(gold)
    return next((1 / (i + 1) for i, key in enumerate(ranked[:depth]) if key in goldset), 0.0)


def score_query(ranked: Sequence[str], gold: Collection[str]) -> dict[str, float]:
    """All metrics for one query; ``ranked`` should already be distinct (see ``dedupe``)."""
    out = {f"R@{k}": recall_at(ranked, gold, k) for k in RECALL_KS}
    out["nDCG@10"] = ndcg_at(ranked, gold)
    out["MRR"] = reciprocal_rank(ranked, gold)
    return out


def average(per_query: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Mean of each metric over queries; an empty run averages to zeros."""
    totals = dict.fromkeys(METRIC_NAMES, 0.0)
    n = 0
    for scores in per_query:
        n += 1
        for name in METRIC_NAMES:
            totals[name] += scores[name]
    return {name: (value / n if n else 0.0) for name, value in totals.items()}


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile (0-100), linear between closest ranks; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * pct / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def latency_summary(ms: Sequence[float]) -> dict[str, float]:
    return {"p50": percentile(ms, 50), "p95": percentile(ms, 95), "p99": percentile(ms, 99)}
