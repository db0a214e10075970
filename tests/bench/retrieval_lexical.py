"""Lexical retrieval quality on the public bench sets: R@1/5/10, nDCG@10, MRR, latency.

Run from the repo root: ``.venv/bin/python tests/bench/retrieval_lexical.py``.

Each data set's catalogue goes into a fresh temporary database (one toolkit per data set,
slug = data set name, ``grp`` = the line's toolkit, ``upstream_name`` = the line's name) and
every dev query runs through ``fts.search(limit=100)``, end to end through aiosqlite.

Tuning log (nDCG@10 on dev; toolbench / bfcl-live / metatool / livemcpbench):
  reference bm25-split (eval_reference.py)                       0.700 0.708 0.596 0.349
  this module's first cut (= bm25-split + slug + joined query)   0.696 0.708 0.599 0.346
  column weights 3,2,1,1 (name, toolkit, description, params)    0.704 0.710 0.598 0.349
  weights 2,1,1,1 / 1,1,1,0.5 / 2,2,1,0.5 / 1.5,1.5,1,1          within +-0.01 of the above
  query without joined identifier forms                          0.689 0.706 0.598 0.346
  query term frequency (repeat a repeated word, cap 2)           0.704 0.705 0.594 0.335  (dropped)
  + full English function-word stop list + request fillers      0.706 0.715 0.604 0.371
  + joined name form instead of repeating the split words        0.709 0.717 0.602 0.348  (alone)
  both, weights 1,1,1,1                                          0.703 0.719 0.611 0.360
  both, weights 3,2,1,1  (chosen)                                0.712 0.724 0.609 0.364
  both, weights 3,2,1,0.5                                        0.714 0.720 0.609 0.357
  function words only (no fillers)                               0.711 0.718 0.607 0.359
  chosen, name column = upstream name only, through fts.search  0.709 0.725 0.611 0.364
  + rarity budget (tokens rarest-first within 1,000 rows)       0.705 0.725 0.611 0.364  (final)
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance.db.connection import Database, dumps
from appliance.search import fts, metrics

BENCH = Path(__file__).resolve().parents[3] / "shared" / "bench" / "retrieval"
SETS = ("toolbench", "bfcl-live", "metatool", "livemcpbench")
MIGRATIONS = Path("migrations")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


async def load_catalog(db: Database, slug: str, catalog: list[dict[str, Any]]) -> dict[int, str]:
    """Store and index one bench catalogue; return tool id -> gold key (``grp/upstream_name``).

    The one piece the team replaces with ``toolspoke import catalog`` later.
    """
    keys: dict[int, str] = {}
    async with db.write() as tx:
        kit = await tx.run(
            "INSERT INTO toolkits (project_id, slug, source_kind, title) VALUES (1, ?, 'catalog', ?)",
            (slug, slug),
        )
        rows = []
        for n, line in enumerate(catalog):
            # A zero-padded number: unique, and no query word ("17 days") matches it.
            name = f"{slug}__{n:05d}"
            tool_id = await tx.run(
                "INSERT INTO tools (toolkit_id, name, upstream_name, grp, description, kind, input_schema)"
                " VALUES (?, ?, ?, ?, ?, 'read', ?)",
                (
                    kit,
                    name,
                    line["name"],
                    line["toolkit"],
                    line.get("description") or "",
                    dumps(line.get("input_schema") or {}),
                ),
            )
            keys[tool_id] = f"{line['toolkit']}/{line['name']}"
            rows.append(
                fts.IndexRow(
                    tool_id,
                    name,
                    slug,
                    line["toolkit"],
                    line.get("description") or "",
                    line.get("input_schema") or {},
                    upstream_name=line["name"],
                )
            )
        await fts.index_tools(tx, rows)
    return keys


async def evaluate(name: str) -> dict[str, float]:
    catalog = read_jsonl(BENCH / name / "catalog.jsonl")
    queries = read_jsonl(BENCH / name / "queries-dev.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(Path(tmp) / "bench.db")
        await db.open(MIGRATIONS)
        try:
            keys = await load_catalog(db, name, catalog)
            per_query, lat = [], []
            async with db.read() as conn:
                for q in queries:
                    t0 = time.perf_counter()
                    hits = await fts.search(conn, q["query"], limit=100)
                    lat.append((time.perf_counter() - t0) * 1000)
                    ranked = metrics.dedupe(keys[i] for i, _ in hits)
                    per_query.append(metrics.score_query(ranked, q["gold"]))
        finally:
            await db.close()
    return {**metrics.average(per_query), **metrics.latency_summary(lat), "n": len(queries)}


async def main() -> None:
    print("| data set | n | R@1 | R@5 | R@10 | nDCG@10 | MRR | p50 ms | p95 ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in SETS:
        r = await evaluate(name)
        print(
            f"| {name} | {r['n']:.0f} | {r['R@1']:.3f} | {r['R@5']:.3f} | {r['R@10']:.3f} | "
            f"{r['nDCG@10']:.3f} | {r['MRR']:.3f} | {r['p50']:.2f} | {r['p95']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main())
