"""Hybrid ranking: fuse the lexical and the nearest-neighbour lists into one. Pure.

Both inputs are candidate lists, best first, as (tool id, score). Each list's scores are
standardised within the list (z-scores: BM25 has no fixed scale and cosines bunch together,
so what counts is how far a candidate stands out from the others found for this query); a
tool missing from a list gets that list's lowest z-score. Then

    fused = a * z_lexical + (1 - a) * z_semantic
            + TOOLKIT_BOOST * (best fused score within the tool's service)

where ``a`` is LEXICAL_WEIGHT scaled, for this query, by how sure each list is: a list's
confidence is its best z-score (how far its top candidate stands out from the rest it found),
and each side's weight is its prior weight times its confidence,

    a = LEXICAL_WEIGHT * c_lexical / (LEXICAL_WEIGHT * c_lexical + (1 - LEXICAL_WEIGHT) * c_semantic)

A query that names a rare word of one tool gives a lexical list with one clear winner and the
words get their say; vague prose gives flat BM25 scores and the meaning decides (dev queries:
+0.0005 to +0.005 nDCG@10 per set; held out in two-fold cross-validation +0.01 on the mean of the
four sets; docs/search.md).

The service term (a service is a toolkit's group: an OpenAPI tag, a catalogue's own toolkit)
lifts the siblings of a strong match: tasks often need several tools of one service
(ToolBench: +0.003 to +0.008 nDCG@10), and it is neutral when all tools share one.
Tuned on the dev queries of the four bench sets only (docs/search.md, tuning log): min-max
scaling, reciprocal rank fusion (the bench's baseline) and other weights measured lower.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# How much of the fused score comes from the lexical side (dev-tuned; see docs/search.md).
LEXICAL_WEIGHT = 0.48
TOOLKIT_BOOST = 0.15
# A list's confidence never drops below this (a list of one, or of equal scores, has a best
# z-score of 0 and would otherwise lose its whole say).
MIN_CONFIDENCE = 0.1
# Candidates taken from each side before fusing.
CANDIDATES = 100


@dataclass(frozen=True)
class Fused:
    tool_id: int
    score: float
    lexical_rank: int | None  # 1-based; None: not a lexical candidate
    lexical_score: float | None
    semantic_rank: int | None
    semantic_score: float | None  # cosine
    # What each term gave ``score`` (they add up to it): the weighted z-scores and the service
    # term. None where the score was not fused (a semantic-only ranking).
    lexical_part: float | None = None
    semantic_part: float | None = None
    service_part: float | None = None


def standardised(hits: Sequence[tuple[int, float]]) -> dict[int, float]:
    """Each hit's z-score within the list; all 0.0 when the scores do not vary."""
    if not hits:
        return {}
    # Plain floats: ``statistics.pstdev`` computes exactly with fractions, ~0.3 ms per list.
    count = len(hits)
    mean = math.fsum(s for _, s in hits) / count
    spread = math.sqrt(math.fsum((s - mean) ** 2 for _, s in hits) / count) or 1.0
    return {tool_id: (s - mean) / spread for tool_id, s in hits}


def fuse(
    lexical: Sequence[tuple[int, float]],
    semantic: Sequence[tuple[int, float]],
    *,
    limit: int,
    toolkit_of: Mapping[int, int] | None = None,
    lexical_weight: float = LEXICAL_WEIGHT,
    toolkit_boost: float = TOOLKIT_BOOST,
    by_confidence: bool = True,
) -> list[Fused]:
    """The fused list, best first, cut to ``limit``; ties keep the lexical order, then semantic.

    ``by_confidence`` scales the two weights by each list's confidence (module docstring); off,
    the weights are the fixed ``lexical_weight`` and its complement (the bench's A/B)."""
    lex_z = standardised(lexical)
    sem_z = standardised(semantic)
    lex_floor = min(lex_z.values(), default=0.0)
    sem_floor = min(sem_z.values(), default=0.0)
    order = list(dict.fromkeys([t for t, _ in lexical] + [t for t, _ in semantic]))
    if by_confidence and lex_z and sem_z:
        lex_part = lexical_weight * max(max(lex_z.values()), MIN_CONFIDENCE)
        sem_part = (1 - lexical_weight) * max(max(sem_z.values()), MIN_CONFIDENCE)
        lexical_weight = lex_part / (lex_part + sem_part)
    semantic_weight = 1 - lexical_weight
    base = {
        t: lexical_weight * lex_z.get(t, lex_floor) + semantic_weight * sem_z.get(t, sem_floor) for t in order
    }
    score_of = base
    if toolkit_of is not None and toolkit_boost:
        best: dict[int, float] = {}
        for t, score in base.items():
            kit = toolkit_of.get(t, -t)
            if score > best.get(kit, -math.inf):
                best[kit] = score
        score_of = {t: s + toolkit_boost * best[toolkit_of.get(t, -t)] for t, s in base.items()}
    # ``sorted`` is stable: equal scores keep the candidates' order (lexical first).
    top = sorted(order, key=score_of.__getitem__, reverse=True)[: max(0, limit)]
    lex_rank = {tool_id: i + 1 for i, (tool_id, _) in enumerate(lexical)}
    sem_rank = {tool_id: i + 1 for i, (tool_id, _) in enumerate(semantic)}
    lex_score = dict(lexical)
    sem_score = dict(semantic)
    return [
        Fused(
            t,
            score_of[t],
            lex_rank.get(t),
            lex_score.get(t),
            sem_rank.get(t),
            sem_score.get(t),
            lexical_weight * lex_z.get(t, lex_floor),
            semantic_weight * sem_z.get(t, sem_floor),
            score_of[t] - base[t],
        )
        for t in top
    ]
