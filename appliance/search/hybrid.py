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

A request of several asks (``search/asks.py``) is also ranked ask by ask, each ask's lists
fused as above, and ``rank`` adds to each tool of the whole request's fused list

    ASK_WEIGHT * (its best fused score among the asks)

so a tool that one ask finds strongly climbs even when the rest of the request is about other
things (dev queries, two-fold cross-validated: ToolBench +0.04 nDCG@10, whose requests run to
eight sentences; the other sets within +-0.004).

The usage term (optional, off by default: ``search_usage_boost``) adds, for each candidate,

    USAGE_BOOST * calls(query, tool) / (searches(query) + USAGE_PRIOR)

from the deployment's usage log (``search/usage.observed_in``): of the logged searches with
this normalised query, the share that led to a call of this tool, smoothed towards 0 so that
one observation is worth less than many (one call after one search: a third of the term at
most). It is bounded by USAGE_BOOST (about one standard deviation of a list's scores), only
reorders candidates the query found, and is exactly 0 for a query never logged: with an empty
log the ranking is the one without it.
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
# The usage term's ceiling, in z-score units, and its smoothing (pseudo-searches that led to
# no call). Set by reasoning, not tuned: see the module docstring and docs/search.md.
USAGE_BOOST = 1.0
USAGE_PRIOR = 2.0
# How much an ask's own fused score counts beside the whole request's (``rank``; chosen by
# two-fold cross-validation on the dev queries: the halves picked 0.75 and 1.0).
ASK_WEIGHT = 0.75


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
    usage_part: float | None = None  # the usage term; None where it was off
    ask_part: float | None = None  # what the request's asks gave (``rank``); None: no asks


def rank(
    lexical: Sequence[tuple[int, float]],
    semantic: Sequence[tuple[int, float]],
    asks: Sequence[tuple[Sequence[tuple[int, float]], Sequence[tuple[int, float]]]] = (),
    *,
    limit: int,
    toolkit_of: Mapping[int, int] | None = None,
    usage: Mapping[int, float] | None = None,
    lexical_weight: float = LEXICAL_WEIGHT,
    toolkit_boost: float = TOOLKIT_BOOST,
    by_confidence: bool = True,
) -> list[Fused]:
    """A request's hybrid ranking: ``fuse`` of its two lists and, when it has two asks or more
    (each its own lexical and semantic list, fused alike), ASK_WEIGHT times each tool's best
    fused score among the asks added (the lowest such score for a tool no ask found)."""
    knobs = _Knobs(toolkit_of, lexical_weight, toolkit_boost, by_confidence)
    best: dict[int, float] = {}
    if len(asks) >= 2:
        for words, meaning in asks:
            for t, score in _scored(words, meaning, knobs).serviced.items():
                if score > best.get(t, -math.inf):
                    best[t] = score
    return fuse(
        lexical,
        semantic,
        limit=limit,
        toolkit_of=toolkit_of,
        lexical_weight=lexical_weight,
        toolkit_boost=toolkit_boost,
        by_confidence=by_confidence,
        usage=usage,
        asks=best or None,
    )


def usage_prior(searches: int, calls: Mapping[int, int]) -> dict[int, float]:
    """Each tool's usage term from the log's counts for one normalised query."""
    if searches <= 0:
        return {}
    return {t: USAGE_BOOST * c / (searches + USAGE_PRIOR) for t, c in calls.items() if c > 0}


def standardised(hits: Sequence[tuple[int, float]]) -> dict[int, float]:
    """Each hit's z-score within the list; all 0.0 when the scores do not vary."""
    if not hits:
        return {}
    # Plain floats: ``statistics.pstdev`` computes exactly with fractions, ~0.3 ms per list.
    count = len(hits)
    mean = math.fsum(s for _, s in hits) / count
    spread = math.sqrt(math.fsum((s - mean) ** 2 for _, s in hits) / count) or 1.0
    return {tool_id: (s - mean) / spread for tool_id, s in hits}


@dataclass(frozen=True)
class _Knobs:
    toolkit_of: Mapping[int, int] | None = None
    lexical_weight: float = LEXICAL_WEIGHT
    toolkit_boost: float = TOOLKIT_BOOST
    by_confidence: bool = True


@dataclass
class _Scores:
    order: list[int]  # every candidate: lexical first, then semantic, then ``also``
    lex_z: dict[int, float]
    sem_z: dict[int, float]
    lex_floor: float
    sem_floor: float
    lexical_weight: float  # this query's, after the confidence scaling
    base: dict[int, float]  # the weighted z-scores
    serviced: dict[int, float]  # with the service term


def _scored(
    lexical: Sequence[tuple[int, float]],
    semantic: Sequence[tuple[int, float]],
    knobs: _Knobs,
    also: Sequence[int] = (),
) -> _Scores:
    """Every candidate's fused score before the asks' and usage terms (module docstring)."""
    lex_z = standardised(lexical)
    sem_z = standardised(semantic)
    lex_floor = min(lex_z.values(), default=0.0)
    sem_floor = min(sem_z.values(), default=0.0)
    order = list(dict.fromkeys([t for t, _ in lexical] + [t for t, _ in semantic] + list(also)))
    lexical_weight = knobs.lexical_weight
    if knobs.by_confidence and lex_z and sem_z:
        lex_part = lexical_weight * max(max(lex_z.values()), MIN_CONFIDENCE)
        sem_part = (1 - lexical_weight) * max(max(sem_z.values()), MIN_CONFIDENCE)
        lexical_weight = lex_part / (lex_part + sem_part)
    semantic_weight = 1 - lexical_weight
    base = {
        t: lexical_weight * lex_z.get(t, lex_floor) + semantic_weight * sem_z.get(t, sem_floor) for t in order
    }
    serviced = base
    toolkit_of = knobs.toolkit_of
    if toolkit_of is not None and knobs.toolkit_boost:
        kits = [toolkit_of.get(t, -t) for t in order]  # ``base`` is in ``order``
        best: dict[int, float] = {}
        for kit, score in zip(kits, base.values(), strict=True):
            if score > best.get(kit, -math.inf):
                best[kit] = score
        boost = knobs.toolkit_boost
        serviced = {t: s + boost * best[kit] for (t, s), kit in zip(base.items(), kits, strict=True)}
    return _Scores(order, lex_z, sem_z, lex_floor, sem_floor, lexical_weight, base, serviced)


def fuse(
    lexical: Sequence[tuple[int, float]],
    semantic: Sequence[tuple[int, float]],
    *,
    limit: int,
    toolkit_of: Mapping[int, int] | None = None,
    lexical_weight: float = LEXICAL_WEIGHT,
    toolkit_boost: float = TOOLKIT_BOOST,
    by_confidence: bool = True,
    usage: Mapping[int, float] | None = None,
    asks: Mapping[int, float] | None = None,
) -> list[Fused]:
    """The fused list, best first, cut to ``limit``; ties keep the lexical order, then semantic.

    ``by_confidence`` scales the two weights by each list's confidence (module docstring); off,
    the weights are the fixed ``lexical_weight`` and its complement (the bench's A/B).
    ``usage``: each tool's usage term (``usage_prior``), added last; None: off.
    ``asks`` (from ``rank``): each tool's best fused score among the request's asks; the tools
    only an ask found join the candidates (each list's lowest z-score, their service's term)."""
    knobs = _Knobs(toolkit_of, lexical_weight, toolkit_boost, by_confidence)
    scores = _scored(lexical, semantic, knobs, also=list(asks or ()))
    score_of = serviced = scores.serviced
    ask_term: dict[int, float] | None = None
    if asks:
        floor = min(asks.values())
        ask_term = {t: ASK_WEIGHT * asks.get(t, floor) for t in scores.order}
        score_of = {t: s + ask_term[t] for t, s in serviced.items()}
    asked = score_of
    if usage:
        score_of = {t: s + usage.get(t, 0.0) for t, s in asked.items()}
    # ``sorted`` is stable: equal scores keep the candidates' order (lexical first).
    top = sorted(scores.order, key=score_of.__getitem__, reverse=True)[: max(0, limit)]
    lex_rank = {tool_id: i + 1 for i, (tool_id, _) in enumerate(lexical)}
    sem_rank = {tool_id: i + 1 for i, (tool_id, _) in enumerate(semantic)}
    lex_score = dict(lexical)
    sem_score = dict(semantic)
    weight = scores.lexical_weight
    return [
        Fused(
            t,
            score_of[t],
            lex_rank.get(t),
            lex_score.get(t),
            sem_rank.get(t),
            sem_score.get(t),
            weight * scores.lex_z.get(t, scores.lex_floor),
            (1 - weight) * scores.sem_z.get(t, scores.sem_floor),
            serviced[t] - scores.base[t],
            None if usage is None else score_of[t] - asked[t],
            None if ask_term is None else ask_term[t],
        )
        for t in top
    ]
