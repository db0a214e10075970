"""Hybrid search latency at 10,000 and 100,000 tools, with the query embedded by the local model.

Run from the repo root: ``.venv/bin/python tests/bench/hybrid_latency.py [sizes...]``.

The catalogue is ``search_latency.py``'s (the four bench catalogues replicated under varied
toolkit slugs, groups and names). Embedding 100,000 tools with the local model would take tens
of minutes on this machine, so only the 3,733 source tools are embedded for real; every
replica gets its source tool's vector plus a little noise (renormalised), stored through the
real vector store. Queries are real and embedded for real on every search. Timed: the agent's
``search`` (``auto`` ranking, served hybrid: lexical + query embedding + nearest neighbours +
fusion + loading the tools), then the query embedding alone and the nearest-neighbour step alone.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance import config
from appliance.gateway.runtime import Runtime
from appliance.gateway.searching import search
from appliance.search import metrics, vectors
from appliance.search.embedders import LocalEmbedder
from tests.bench.search_latency import MIGRATIONS, build, queries

ROUNDS = 3


async def embed_catalogue(rt: Runtime, emb: LocalEmbedder) -> float:
    """Real vectors for distinct texts, replicas take their source's vector plus noise."""
    async with rt.db.read() as conn:
        todo, _ = await conn.batch(lambda r: vectors.plan_in(r, emb.model_id))
    # A replica's text differs from its source's only in toolkit, group and name style:
    # key the real embedding on the description, which replicas keep verbatim.
    by_desc: dict[str, list[vectors.Todo]] = {}
    for t in todo:
        by_desc.setdefault(t.text.split(": ", 1)[-1], []).append(t)
    sources = [group[0] for group in by_desc.values()]
    started = time.perf_counter()
    real = emb.embed_sync([t.text for t in sources])
    seconds = time.perf_counter() - started
    rng = np.random.default_rng(0)
    items: list[tuple[vectors.Todo, np.ndarray]] = []
    for vec, group in zip(real, by_desc.values(), strict=True):
        for i, t in enumerate(group):
            v = vec if i == 0 else vec + rng.normal(0, 0.02, vec.shape).astype(np.float32)
            items.append((t, v / np.linalg.norm(v)))
    for start in range(0, len(items), 2000):
        async with rt.db.write() as tx:
            await vectors.store(tx, emb.model_id, items[start : start + 2000])
    return len(sources) / seconds


async def measure(size: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        # A generous deadline: a stall of this busy machine must not trip the breaker and turn
        # the timed searches lexical (each round also checks that every search was hybrid).
        settings = config.load(
            env={
                "TOOLSPOKE_DATA_DIR": tmp,
                "TOOLSPOKE_EMBEDDINGS": "local",
                "TOOLSPOKE_EMBEDDINGS_TIMEOUT_S": "10",
            }
        )
        rt = Runtime(settings)
        await rt.open(MIGRATIONS)
        try:
            names = await build(rt.db, size)
            emb = rt.semantic.provider
            assert isinstance(emb, LocalEmbedder)
            rate = await embed_catalogue(rt, emb)
            qs = queries(names, random.Random(7))
            for q in qs[:20]:  # warm: page cache, the vector matrix, the model
                out = await search(rt, q)
                assert out.ranking == "hybrid", out.reason
            rounds, embed_ms, knn_ms, cpu_ms = [], [], [], []
            seq_rounds, seq_cpu = [], []
            overlap = rt.semantic.expect_semantic
            for _ in range(ROUNDS):
                # A/B in the same run: the query embedding beside the lexical pass (shipped)
                # and after it. Remembered query vectors are dropped before each round: every
                # timed search embeds its query.
                for sequential in (False, True):
                    rt.semantic.expect_semantic = (lambda: False) if sequential else overlap  # type: ignore[method-assign]
                    rt.semantic.forget_queries()
                    ms, cpu = [], []
                    for q in qs:
                        t, c = time.perf_counter(), time.process_time()
                        served = await search(rt, q)
                        ms.append((time.perf_counter() - t) * 1000)
                        cpu.append((time.process_time() - c) * 1000)
                        assert served.ranking == "hybrid", served.reason
                    (seq_rounds if sequential else rounds).append(metrics.latency_summary(ms))
                    (seq_cpu if sequential else cpu_ms).extend(cpu)
            rt.semantic.expect_semantic = overlap  # type: ignore[method-assign]
            async with rt.db.read() as conn:
                matrix = await conn.batch(lambda r: vectors.matrix_in(r, emb.model_id))
            assert matrix is not None
            exact = vectors.Matrix(
                matrix.version, matrix.ids, matrix.toolkits, matrix.groups, matrix.vectors, matrix.scale
            )
            agree = []
            for q in qs:
                t = time.perf_counter()
                qv = emb.embed_sync([q])[0]
                embed_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                got = vectors.nearest(matrix, qv, k=100)
                knn_ms.append((time.perf_counter() - t) * 1000)
                want = {i for i, _ in vectors.nearest(exact, qv, k=10)}
                agree.append(len(want & {i for i, _ in got[:10]}) / 10)
        finally:
            await rt.close()
    middle = sorted(rounds, key=lambda r: r["p50"])[len(rounds) // 2]
    seq = sorted(seq_rounds, key=lambda r: r["p50"])[len(seq_rounds) // 2]
    seq_c = metrics.latency_summary(seq_cpu)
    e, k = metrics.latency_summary(embed_ms), metrics.latency_summary(knn_ms)
    cpu = metrics.latency_summary(cpu_ms)
    return {
        **middle,
        "n": len(qs),
        "agree": sum(agree) / len(agree),
        "sketch": float(matrix.sketch is not None),
        "cpu_p50": cpu["p50"],
        "cpu_p95": cpu["p95"],
        "embed_p50": e["p50"],
        "embed_p95": e["p95"],
        "knn_p50": k["p50"],
        "knn_p95": k["p95"],
        "rate": rate,
        "seq_p50": seq["p50"],
        "seq_p95": seq["p95"],
        "seq_cpu_p50": seq_c["p50"],
    }


async def main(sizes: list[int]) -> None:
    # Wall times on a shared machine swing with its load; CPU time per search (all threads of
    # this process) is the steadier figure when other work competes for the cores.
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(
        f"| tools | queries | hybrid search p50 ms (median of {ROUNDS} rounds) | p95 ms | CPU ms per search "
        "p50 / p95 | query embedding p50 / p95 ms | nearest neighbours p50 / p95 ms (top-10 agreement "
        "with exact) | backfill tools/s | embedding after the lexical pass: p50 / p95 ms, CPU p50 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for size in sizes:
        r = await measure(size)
        print(
            f"| {size:,} | {r['n']:.0f} | {r['p50']:.2f} | {r['p95']:.2f} "
            f"| {r['cpu_p50']:.2f} / {r['cpu_p95']:.2f} "
            f"| {r['embed_p50']:.2f} / {r['embed_p95']:.2f} | {r['knn_p50']:.2f} / {r['knn_p95']:.2f} "
            f"({'sketch' if r['sketch'] else 'exact'}, {r['agree']:.3f}) "
            f"| {r['rate']:.0f} | {r['seq_p50']:.2f} / {r['seq_p95']:.2f}, {r['seq_cpu_p50']:.2f} |",
            flush=True,
        )
        print(f"load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    asyncio.run(main([int(a) for a in sys.argv[1:]] or [10_000, 100_000]))
