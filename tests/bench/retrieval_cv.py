"""Two-fold cross-validation of the hybrid fusion's knobs on the dev queries (issue 7).

``retrieval.py`` calls ``cross_validate`` on each data directory it has imported and backfilled.
For every dev query it gathers, once, what the shipped search fuses (``fts.search_in``, the query
vector from the configured provider, ``vectors.nearest`` and ``vectors.groups_of``, each
``hybrid.CANDIDATES`` deep; the same for each of its asks, ``search/asks.py``), then ranks again
with ``hybrid.rank`` over a grid of lexical weight x service boost. The queries of each set are
split in two halves by a hash of their id; the knobs that give the best mean nDCG@10 over the four
sets on one half are scored on the other half, both ways, so every query is scored once with knobs
chosen without it. A held-out figure close to the full-dev figure says the knobs are not fitted to
these queries.

Run alone: ``.venv/bin/python tests/bench/retrieval_cv.py DATA_DIR SET [SET ...]`` on a data
directory that ``retrieval.py`` (or the CLI) has imported and backfilled.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "data" / "retrieval"
WEIGHTS = (0.42, 0.45, 0.48, 0.51, 0.54)
BOOSTS = (0.0, 0.1, 0.15, 0.2, 0.25)


@dataclass
class Gathered:
    """One query's inputs to the fusion, as the shipped search computes them."""

    id: str
    gold: set[str]
    lexical: list[tuple[int, float]]
    semantic: list[tuple[int, float]]
    groups: dict[int, int]
    # each ask's (lexical, semantic) lists (search/asks.py); empty when the query has none
    asks: list[tuple[list[tuple[int, float]], list[tuple[int, float]]]]


@dataclass
class SetData:
    items: list[Gathered]
    tools: dict[int, Any]  # the catalogue's tools by id (to key results as ``eval`` does)


def fold_of(query_id: str) -> int:
    """0 or 1, from a hash of the query id: deterministic, independent of file order."""
    return hashlib.blake2b(query_id.encode(), digest_size=8).digest()[0] & 1


async def gather(data: str, sets: Sequence[str]) -> dict[str, SetData]:
    """Every set's dev queries' candidate lists in ``data`` (a backfilled data directory)."""
    os.environ.setdefault("TOOLSPOKE_EMBEDDINGS", "local")
    from appliance.catalogue import store
    from appliance.cli.common import settings_for
    from appliance.gateway.runtime import Runtime
    from appliance.search import fts, hybrid, vectors
    from appliance.search.asks import asks_of

    rt = Runtime(settings_for(None, data_dir=data))
    await rt.open()
    try:
        model_id = rt.semantic.model_id
        assert model_id is not None, "no embedding provider configured"
        async with rt.db.read() as conn:
            matrix = await conn.batch(lambda r: vectors.matrix_in(r, model_id))
            assert matrix is not None, "the catalogue is not backfilled"
            ids = [int(i) for i in matrix.ids]
            tools = {t.id: t for t in await conn.batch(lambda r: store.tools_by_ids_in(r, ids))}
        out: dict[str, SetData] = {}
        for name in sets:
            items = []
            for line in (BENCH / name / "queries-dev.jsonl").read_text().splitlines():
                if not line.strip():
                    continue
                doc = json.loads(line)
                query = doc["query"]
                asks = asks_of(query)
                texts = [query, *(a.text for a in asks)]
                async with rt.db.read() as conn:
                    said = await conn.batch(
                        lambda r, ts=texts: [fts.search_in(r, t, limit=hybrid.CANDIDATES) for t in ts]
                    )
                qvec, ask_vecs = await rt.semantic.query_vectors(query, asks)
                assert qvec is not None
                near = vectors.nearest(matrix, qvec, k=hybrid.CANDIDATES)
                pairs = vectors.ask_lists(matrix, (said[0], near), said[1:], ask_vecs, k=hybrid.CANDIDATES)
                ids = [t for hits in (said[0], near, *(h for p in pairs for h in p)) for t, _ in hits]
                groups = vectors.groups_of(matrix, ids)
                items.append(Gathered(str(doc["id"]), set(doc["gold"]), said[0], near, groups, pairs))
            out[name] = SetData(items, tools)
        return out
    finally:
        await rt.close()


def scores(data: SetData, weight: float, boost: float, by_confidence: bool) -> list[float]:
    """nDCG@10 of each query with these knobs, ranked and keyed exactly as ``toolspoke eval``."""
    from appliance.gateway.evaluation import _ranked
    from appliance.search import hybrid, metrics

    out = []
    for item in data.items:
        fused = hybrid.rank(
            item.lexical,
            item.semantic,
            item.asks,
            limit=100,
            toolkit_of=item.groups,
            lexical_weight=weight,
            toolkit_boost=boost,
            by_confidence=by_confidence,
        )
        ranked = _ranked([data.tools[f.tool_id] for f in fused if f.tool_id in data.tools], item.gold)
        out.append(metrics.ndcg_at(ranked, item.gold))
    return out


def cross_validate(gathered: dict[str, SetData], *, by_confidence: bool = True) -> dict[str, Any]:
    """Full-dev nDCG@10 at the shipped knobs, and the two-fold held-out nDCG@10, per set.

    ``by_confidence=False`` does the same for fixed weights (the fusion before session 4)."""
    from appliance.search import hybrid

    grid = [(w, b) for w in WEIGHTS for b in BOOSTS]
    shipped = (hybrid.LEXICAL_WEIGHT, hybrid.TOOLKIT_BOOST)
    if shipped not in grid:
        grid.append(shipped)
    table = {
        (knobs, name): scores(data, *knobs, by_confidence)
        for knobs in grid
        for name, data in gathered.items()
    }
    folds = {name: [fold_of(i.id) for i in data.items] for name, data in gathered.items()}

    def mean_on(knobs: tuple[float, float], half: int) -> float:
        per_set = []
        for name in gathered:
            picked = [s for s, f in zip(table[knobs, name], folds[name], strict=True) if f == half]
            per_set.append(sum(picked) / max(1, len(picked)))
        return sum(per_set) / len(per_set)

    chosen = {half: max(grid, key=lambda k, h=half: mean_on(k, h)) for half in (0, 1)}
    result: dict[str, Any] = {"chosen": chosen, "shipped": shipped, "sets": {}}
    for name in gathered:
        full = table[shipped, name]
        # Each query is scored with the knobs chosen on the other half.
        held = [table[chosen[1 - f], name][i] for i, f in enumerate(folds[name])]
        result["sets"][name] = {
            "queries": len(full),
            "halves": (folds[name].count(0), folds[name].count(1)),
            "full": sum(full) / len(full),
            "cv": sum(held) / len(held),
        }
    return result


HEADER = (
    "| catalogue | queries (halves) | full dev | cross-validated | fixed: full dev | cross-validated |\n"
    "|---|---|---|---|---|---|"
)


def report(label: str, gathered: dict[str, SetData]) -> str:
    """Table rows (hybrid nDCG@10), shipped fusion beside fixed weights, and the knobs chosen."""
    shipped = cross_validate(gathered)
    fixed = cross_validate(gathered, by_confidence=False)
    lines = []
    for name, r in shipped["sets"].items():
        f = fixed["sets"][name]
        halves = f"{r['halves'][0]}/{r['halves'][1]}"
        lines.append(
            f"| {label}{name} | {r['queries']} ({halves}) | {r['full']:.4f} | {r['cv']:.4f} "
            f"| {f['full']:.4f} | {f['cv']:.4f} |"
        )
    for what, res in (("shipped", shipped), ("fixed weights", fixed)):
        lines.append(
            f"\n{label or 'own catalogues: '}{what}: knobs (lexical weight, boost) {res['shipped']}; "
            f"chosen on half 0: {res['chosen'][0]}, on half 1: {res['chosen'][1]}"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    data, *sets = argv
    gathered = asyncio.run(gather(data, sets))
    print(HEADER)
    print(report("", gathered))


if __name__ == "__main__":
    main(sys.argv[1:])
