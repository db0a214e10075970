"""Two-fold cross-validation of the hybrid ranking on the dev queries (issue 7, issue 22).

``retrieval.py`` calls ``report`` on each data directory it has imported and backfilled. For
every dev query it gathers, once, what the shipped search fuses (``fts.search_in``, the query
vector from the configured provider, ``vectors.nearest`` and ``vectors.groups_of``, each
``hybrid.CANDIDATES`` deep; the same for each of its asks, ``search/asks.py``), then ranks again
with ``hybrid.rank`` over a grid of lexical weight x service boost. The queries of each set are
split in two halves by a hash of their id. On one half the query adapter is learned
(``search/adapter.py``, from that half of every set) and the knobs that give the best mean
nDCG@10 over the four sets are chosen; both are scored on the other half, both ways, so every
query is scored once with an adapter and knobs learned without it. A held-out figure close to
the full-dev figure says nothing is fitted to these queries. ``unseen`` scores each set with an
adapter learned from the other three only: what a catalogue it never saw gets.

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


Hits = list[tuple[int, float]]


@dataclass
class Gathered:
    """One query's inputs to the fusion, as the shipped search computes them."""

    id: str
    gold: set[str]
    lexical: Hits
    semantic: Hits
    groups: dict[int, int]
    # each ask's (lexical, semantic) lists (search/asks.py); empty when the query has none
    asks: list[tuple[Hits, Hits]]
    # the provider's vectors and the asks' word lists, to rank again with another adapter
    vector: Any
    ask_vectors: list[Any]
    ask_lexical: list[Hits]


@dataclass
class SetData:
    items: list[Gathered]
    tools: dict[int, Any]  # the catalogue's tools by id (to key results as ``eval`` does)
    matrix: Any  # the catalogue's vectors (vectors.Matrix)


def searchable(name: str) -> bytes:
    """The set's dev queries file with each query cut to what search accepts, as an agent must
    (``MAX_QUERY_CHARS``: one BFCL prompt is 4,737 characters; ``toolspoke eval`` refuses it)."""
    from appliance.search.text import MAX_QUERY_CHARS

    docs = [
        json.loads(line) for line in (BENCH / name / "queries-dev.jsonl").read_text().splitlines() if line
    ]
    return b"".join(json.dumps({**d, "query": d["query"][:MAX_QUERY_CHARS]}).encode() + b"\n" for d in docs)


def fold_of(query_id: str) -> int:
    """0 or 1, from a hash of the query id: deterministic, independent of file order."""
    return hashlib.blake2b(query_id.encode(), digest_size=8).digest()[0] & 1


def _lists(
    matrix: Any, lexical: Hits, ask_lexical: list[Hits], vector: Any, ask_vectors: list[Any], adapter: Any
):
    """What ``gateway/searching.py`` fuses for these inputs: the request's vector and its asks'
    moved by ``adapter`` (``search/adapter.py``; None: as the provider gave them)."""
    from appliance.search import hybrid, vectors

    if adapter is not None:
        vector, ask_vectors = adapter.apply_all(vector, ask_vectors)
    near = vectors.nearest(matrix, vector, k=hybrid.CANDIDATES)
    pairs = vectors.ask_lists(matrix, (lexical, near), ask_lexical, ask_vectors, k=hybrid.CANDIDATES)
    ids = [t for hits in (lexical, near, *(h for p in pairs for h in p)) for t, _ in hits]
    return near, pairs, vectors.groups_of(matrix, ids)


async def gather(data: str, sets: Sequence[str], *, adapter: Any = "shipped") -> dict[str, SetData]:
    """Every set's dev queries' candidate lists in ``data`` (a backfilled data directory), with
    the shipped query adapter (``adapter=None``: without one)."""
    os.environ.setdefault("TOOLSPOKE_EMBEDDINGS", "local")
    from appliance.catalogue import store
    from appliance.cli.common import settings_for
    from appliance.gateway.runtime import Runtime
    from appliance.search import adapter as query_adapter
    from appliance.search import fts, hybrid, vectors
    from appliance.search.asks import asks_of

    rt = Runtime(settings_for(None, data_dir=data))
    await rt.open()
    try:
        model_id = rt.semantic.model_id
        assert model_id is not None, "no embedding provider configured"
        if adapter == "shipped":
            adapter = query_adapter.for_model(model_id)
        async with rt.db.read() as conn:
            matrix = await conn.batch(lambda r: vectors.matrix_in(r, model_id))
            assert matrix is not None, "the catalogue is not backfilled"
            ids = [int(i) for i in matrix.ids]
            tools = {t.id: t for t in await conn.batch(lambda r: store.tools_by_ids_in(r, ids))}
        out: dict[str, SetData] = {}
        for name in sets:
            items = []
            for line in searchable(name).decode().splitlines():
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
                near, pairs, groups = _lists(matrix, said[0], said[1:], qvec, ask_vecs, adapter)
                items.append(
                    Gathered(
                        str(doc["id"]),
                        set(doc["gold"]),
                        said[0],
                        near,
                        groups,
                        pairs,
                        qvec,
                        ask_vecs,
                        said[1:],
                    )
                )
            out[name] = SetData(items, tools, matrix)
        return out
    finally:
        await rt.close()


def adapted(data: SetData, adapter: Any) -> SetData:
    """``data`` ranked again with ``adapter`` (None: the provider's vectors as they are)."""
    items = []
    for i in data.items:
        near, pairs, groups = _lists(data.matrix, i.lexical, i.ask_lexical, i.vector, i.ask_vectors, adapter)
        items.append(
            Gathered(i.id, i.gold, i.lexical, near, groups, pairs, i.vector, i.ask_vectors, i.ask_lexical)
        )
    return SetData(items, data.tools, data.matrix)


def examples(data: SetData, half: int | None) -> Any:
    """The queries of ``half`` (None: all) as the adapter's training examples."""
    import numpy as np

    from appliance.gateway.evaluation import rows_by_key
    from appliance.search.adapter import Examples

    row_of = rows_by_key([int(i) for i in data.matrix.ids], data.tools.values())
    queries, gold = [], []
    for item in data.items:
        rows = [row_of[k] for k in sorted(item.gold) if k in row_of]
        if rows and (half is None or fold_of(item.id) == half):
            queries.append(item.vector)
            gold.append(rows)
    from appliance.search.vectors import _rows

    tools = _rows(data.matrix, slice(None))
    return Examples(np.stack(queries) if queries else np.zeros((0, tools.shape[1])), gold, tools)


def learned(gathered: dict[str, SetData], half: int | None, leave_out: str | None = None) -> Any:
    """An adapter learned from ``half`` of every set's queries (``leave_out``: but that set's)."""
    from appliance.search import adapter

    sets = [examples(d, half) for name, d in gathered.items() if name != leave_out]
    matrix, _ = adapter.train(sets)
    return adapter.QueryAdapter(matrix, "")


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


def cross_validate(
    gathered: dict[str, SetData], *, by_confidence: bool = True, learn: bool = True
) -> dict[str, Any]:
    """Full-dev nDCG@10 as gathered (the shipped adapter, knobs), and the two-fold held-out
    nDCG@10, per set: on each half an adapter (``learn``; else the gathered vectors as they are)
    and the knobs are learned, and the other half is scored with them.

    ``by_confidence=False`` does the same for fixed weights (the fusion before session 4)."""
    from appliance.search import hybrid

    grid = [(w, b) for w in WEIGHTS for b in BOOSTS]
    shipped = (hybrid.LEXICAL_WEIGHT, hybrid.TOOLKIT_BOOST)
    if shipped not in grid:
        grid.append(shipped)
    folds = {name: [fold_of(i.id) for i in data.items] for name, data in gathered.items()}
    chosen: dict[int, tuple[float, float]] = {}
    held: dict[str, dict[int, float]] = {name: {} for name in gathered}
    for half in (0, 1):
        ranked = gathered
        if learn:
            learnt = learned(gathered, half)
            ranked = {name: adapted(data, learnt) for name, data in gathered.items()}
        table = {(k, name): scores(data, *k, by_confidence) for k in grid for name, data in ranked.items()}

        def mean_on(knobs: tuple[float, float], h: int = half, t: dict = table) -> float:
            per_set = []
            for name in gathered:
                picked = [s for s, f in zip(t[knobs, name], folds[name], strict=True) if f == h]
                per_set.append(sum(picked) / max(1, len(picked)))
            return sum(per_set) / len(per_set)

        chosen[half] = max(grid, key=mean_on)
        for name in gathered:
            for i, f in enumerate(folds[name]):
                if f != half:  # scored with what the other half learned
                    held[name][i] = table[chosen[half], name][i]
    result: dict[str, Any] = {"chosen": chosen, "shipped": shipped, "sets": {}}
    for name, data in gathered.items():
        full = scores(data, *shipped, by_confidence)
        result["sets"][name] = {
            "queries": len(full),
            "halves": (folds[name].count(0), folds[name].count(1)),
            "full": sum(full) / len(full),
            "cv": sum(held[name].values()) / len(held[name]),
        }
    return result


def unseen(gathered: dict[str, SetData]) -> dict[str, tuple[float, float]]:
    """Each set's full-dev nDCG@10 at the shipped knobs without an adapter and with one learned
    from the other sets' dev queries only (a catalogue the adapter never saw)."""
    from appliance.search import hybrid

    knobs = (hybrid.LEXICAL_WEIGHT, hybrid.TOOLKIT_BOOST)
    out = {}
    for name, data in gathered.items():
        without = scores(adapted(data, None), *knobs, True)
        others = scores(adapted(data, learned(gathered, None, leave_out=name)), *knobs, True)
        out[name] = (sum(without) / len(without), sum(others) / len(others))
    return out


HEADER = (
    "| catalogue | queries (halves) | full dev | cross-validated | no adapter: full dev | cross-validated "
    "| fixed weights, no adapter: cross-validated |\n"
    "|---|---|---|---|---|---|---|"
)


def report(label: str, gathered: dict[str, SetData], *, with_unseen: bool = False) -> str:
    """Table rows (hybrid nDCG@10): the shipped ranking (adapter and knobs learned per half),
    without the adapter, with fixed weights; the knobs chosen; and, ``with_unseen``, each set
    with an adapter learned from the other sets only."""
    shipped = cross_validate(gathered)
    bare = {name: adapted(data, None) for name, data in gathered.items()}
    plain = cross_validate(bare, learn=False)
    fixed = cross_validate(bare, by_confidence=False, learn=False)
    lines = []
    for name, r in shipped["sets"].items():
        p, f = plain["sets"][name], fixed["sets"][name]
        halves = f"{r['halves'][0]}/{r['halves'][1]}"
        lines.append(
            f"| {label}{name} | {r['queries']} ({halves}) | {r['full']:.4f} | {r['cv']:.4f} "
            f"| {p['full']:.4f} | {p['cv']:.4f} | {f['cv']:.4f} |"
        )
    for what, res in (("shipped", shipped), ("no adapter", plain), ("fixed weights", fixed)):
        lines.append(
            f"\n{label or 'own catalogues: '}{what}: knobs (lexical weight, boost) {res['shipped']}; "
            f"chosen on half 0: {res['chosen'][0]}, on half 1: {res['chosen'][1]}"
        )
    if with_unseen:
        lines.append(
            f"\n{label or 'own catalogues: '}an adapter learned from the other sets only (full dev):"
        )
        for name, (without, others) in unseen(gathered).items():
            lines.append(
                f"- {name}: {without:.4f} without an adapter, {others:.4f} with it ({others - without:+.4f})"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    data, *sets = argv
    gathered = asyncio.run(gather(data, sets))
    print(HEADER)
    print(report("", gathered, with_unseen=True))


if __name__ == "__main__":
    main(sys.argv[1:])
