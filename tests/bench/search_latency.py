"""Search latency at 10,000 and 100,000 tools: p50/p95/p99 of the agent's ``search_tools``.

Run from the repo root: ``.venv/bin/python tests/bench/search_latency.py [sizes...]``.

The catalogue replicates the four bench catalogues (3,733 tools) under varied toolkit slugs,
groups and OpenAPI-style names (``listAcmeInvoices``, ``get_orders_by_id_v2``) so that rows
are distinct and term statistics look like a large real gateway rather than 27 identical
copies. Queries: 400 dev queries drawn from the four data sets plus 100 exact tool names.
Timing is ``gateway.searching.search_tools`` with the default limit (8): ranking plus loading
the result tools with their schemas, end to end through aiosqlite, as an agent's search runs.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance import config
from appliance.db.connection import Database, dumps
from appliance.gateway.runtime import Runtime
from appliance.gateway.searching import search_tools
from appliance.search import fts, metrics

BENCH = Path(__file__).resolve().parents[2] / "bench" / "data" / "retrieval"
SETS = ("toolbench", "bfcl-live", "metatool", "livemcpbench")
MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
_VENDOR_TEXT = "acme contoso globex initech umbrella stark wayne hooli vandelay soylent tyrell cyberdyne"
VENDORS = tuple(_VENDOR_TEXT.split())
VERBS = ("list", "get", "create", "update", "delete", "search", "fetch", "sync")
_NOUN_TEXT = "invoice order customer ticket repo issue pet user payment shipment report event"
NOUNS = tuple(_NOUN_TEXT.split())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def openapi_style(name: str, rng: random.Random) -> str:
    """A catalogue name rewritten as an operationId in one of the common styles."""
    words = [w for w in "".join(c if c.isalnum() else " " for c in name).split() if w][:5] or ["op"]
    verb = rng.choice(VERBS)
    style = rng.randrange(3)
    if style == 0:
        return verb + "".join(w.capitalize() for w in words)
    if style == 1:
        return "_".join([verb, *(w.lower() for w in words)]) + rng.choice(("", "_v2", "_by_id"))
    return name


async def build(db: Database, size: int) -> list[str]:
    """Store and index ``size`` tools; return a sample of their names for exact-name queries."""
    rng = random.Random(size)
    base = [(s, line) for s in SETS for line in read_jsonl(BENCH / s / "catalog.jsonl")]
    names: list[str] = []
    n = 0
    copy = 0
    while n < size:
        vendor = VENDORS[copy % len(VENDORS)]
        async with db.write() as tx:
            kits: dict[str, int] = {}
            rows = []
            for dataset, line in base:
                if n >= size:
                    break
                slug = f"{dataset}-{vendor}-{copy}"
                if slug not in kits:
                    kits[slug] = await tx.run(
                        "INSERT INTO toolkits (project_id, slug, source_kind) VALUES (1, ?, 'catalog')",
                        (slug,),
                    )
                upstream = line["name"] if copy == 0 else openapi_style(line["name"], rng)
                if copy and rng.random() < 0.3:
                    upstream += rng.choice(NOUNS).capitalize()
                group = line["toolkit"] if copy == 0 else f"{line['toolkit']} {vendor}"
                name = f"{slug}__{n}"
                schema = line.get("input_schema") or {}
                tool_id = await tx.run(
                    "INSERT INTO tools (toolkit_id, name, upstream_name, grp, description, kind,"
                    " input_schema) VALUES (?, ?, ?, ?, ?, 'read', ?)",
                    (kits[slug], name, upstream, group, line.get("description") or "", dumps(schema)),
                )
                rows.append(
                    fts.IndexRow(tool_id, name, slug, group, line.get("description") or "", schema, upstream)
                )
                if rng.random() < 150 / size:
                    names.append(name if rng.random() < 0.5 else upstream)
                n += 1
            await fts.index_tools(tx, rows)
        copy += 1
    async with db.write() as tx:
        await fts.optimize(tx)  # as every import does
    await db.checkpoint()
    return names


def queries(names: list[str], rng: random.Random) -> list[str]:
    prose = [q["query"] for s in SETS for q in read_jsonl(BENCH / s / "queries-dev.jsonl")]
    picked = rng.sample(prose, 400) + rng.sample(names, min(100, len(names)))
    rng.shuffle(picked)
    return picked


ROUNDS = 3  # this machine's timings drift by ±30% between runs: report the median round


async def measure(size: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        rt = Runtime(config.load(env={"TOOLSPOKE_DATA_DIR": tmp}))
        await rt.open(MIGRATIONS)
        try:
            t0 = time.perf_counter()
            names = await build(rt.db, size)
            built = time.perf_counter() - t0
            qs = queries(names, random.Random(7))
            for q in qs[:50]:  # warm the page cache
                await search_tools(rt, q)
            rounds, ranking = [], []
            for _ in range(ROUNDS):
                ms: list[float] = []
                rank_ms: list[float] = []
                for q in qs:
                    t = time.perf_counter()
                    await search_tools(rt, q)
                    ms.append((time.perf_counter() - t) * 1000)
                    # Ranking alone: the same statements without loading the tools' schemas.
                    async with rt.db.read() as conn:
                        t = time.perf_counter()
                        await fts.search(conn, q, limit=8)
                        rank_ms.append((time.perf_counter() - t) * 1000)
                rounds.append(metrics.latency_summary(ms))
                ranking.append(metrics.latency_summary(rank_ms))
        finally:
            await rt.close()
    middle = sorted(rounds, key=lambda r: r["p50"])[len(rounds) // 2]
    rank_mid = sorted(ranking, key=lambda r: r["p50"])[len(ranking) // 2]
    return {
        **middle,
        "n": len(qs),
        "build_s": built,
        "p50_min": min(r["p50"] for r in rounds),
        "p50_max": max(r["p50"] for r in rounds),
        "rank_p50": rank_mid["p50"],
        "rank_p95": rank_mid["p95"],
    }


async def main(sizes: list[int]) -> None:
    print(
        f"| tools | queries | search_tools p50 ms (median of {ROUNDS} rounds; range) | p95 ms | p99 ms "
        "| ranking only p50 / p95 ms | build s |"
    )
    print("|---|---|---|---|---|---|---|")
    for size in sizes:
        r = await measure(size)
        print(
            f"| {size:,} | {r['n']:.0f} | {r['p50']:.2f} ({r['p50_min']:.2f}-{r['p50_max']:.2f}) "
            f"| {r['p95']:.2f} | {r['p99']:.2f} | {r['rank_p50']:.2f} / {r['rank_p95']:.2f} "
            f"| {r['build_s']:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main([int(a) for a in sys.argv[1:]] or [10_000, 100_000]))
