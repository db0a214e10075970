"""Hybrid search at scale: backfill time, memory and hybrid latency over a 100,000-tool catalogue.

Run from the repo root: ``nice -n 10 .venv/bin/python tests/bench/scale.py [size] [--dir DIR]``.

The catalogue is ``search_latency.py``'s (the four bench catalogues replicated under varied
toolkit slugs, groups and operationId styles, so nearly every replica's document text is new).
Unlike ``hybrid_latency.py``, every tool is embedded for real by the shipped backfill
(``gateway.backfill.backfill``, as ``toolspoke backfill`` runs it). Each phase runs in a fresh
process so its memory is its own:

1. build: store and index ``size`` tools (skipped when ``--dir`` already holds them);
2. backfill: embed every tool; wall time, tools/s, peak RSS (``VmHWM``);
3. serve: a new process opens the database as ``serve`` would, warms up, and times the agent's
   ``search`` (hybrid, each query embedded: remembered query vectors are dropped before each
   round); RSS after the searches (``VmRSS``) and its peak.

``--dir`` keeps the database, so a second run can time the serving phase alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance import config
from appliance.gateway.backfill import backfill
from appliance.gateway.runtime import Runtime
from appliance.gateway.searching import search
from appliance.search import metrics
from tests.bench.search_latency import MIGRATIONS, build, queries

ROUNDS = 3


def memory() -> dict[str, float]:
    """This process's resident set now and at its peak, in MiB (Linux ``/proc``)."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) / 1024
    return out


def _runtime(data_dir: str) -> Runtime:
    return Runtime(
        config.load(
            env={
                "TOOLSPOKE_DATA_DIR": data_dir,
                "TOOLSPOKE_EMBEDDINGS": "local",
                # A stall of this shared machine must not trip the breaker mid-round.
                "TOOLSPOKE_EMBEDDINGS_TIMEOUT_S": "10",
                # The backfill's threads, as the operator would set them (default 2).
                **{k: v for k, v in os.environ.items() if k == "TOOLSPOKE_EMBEDDINGS_BACKFILL_THREADS"},
            }
        )
    )


async def in_runtime(
    data_dir: str, phase: Callable[[Runtime, str], Awaitable[dict[str, float]]]
) -> dict[str, float]:
    rt = _runtime(data_dir)
    await rt.open(MIGRATIONS)
    try:
        return await phase(rt, data_dir)
    finally:
        await rt.close()


async def phase_build(rt: Runtime, data_dir: str, size: int) -> dict[str, float]:
    started = time.perf_counter()
    names = await build(rt.db, size)
    Path(data_dir, "names.json").write_text(json.dumps(names))
    return {"build_s": time.perf_counter() - started}


async def phase_backfill(rt: Runtime, data_dir: str) -> dict[str, float]:
    cpu = time.process_time()
    report = await backfill(rt)
    return {
        "backfill_cpu_s": time.process_time() - cpu,
        "tools": report.tools,
        "embedded": report.embedded,
        "reused": report.reused,
        "backfill_s": report.seconds,
        "rate": report.tools_per_s,
        "backfill_hwm": memory()["VmHWM"],
    }


async def phase_serve(rt: Runtime, data_dir: str) -> dict[str, float]:
    opened = memory()["VmRSS"]
    names = json.loads(Path(data_dir, "names.json").read_text())
    qs = queries(names, random.Random(7))
    for q in qs[:20]:  # warm: page cache, the vector matrix, the model
        out = await search(rt, q)
        assert out.ranking == "hybrid", out.reason
    rounds: list[dict[str, float]] = []
    cpu: list[float] = []
    for _ in range(ROUNDS):
        rt.semantic.forget_queries()
        ms = []
        for q in qs:
            t, t_cpu = time.perf_counter(), time.process_time()
            served = await search(rt, q)
            ms.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - t_cpu) * 1000)
            assert served.ranking == "hybrid", served.reason
        rounds.append(metrics.latency_summary(ms))
    middle = sorted(rounds, key=lambda r: r["p50"])[len(rounds) // 2]
    mem = memory()
    cpu_summary = metrics.latency_summary(cpu)
    return {
        "n": len(qs),
        "p50": middle["p50"],
        "p95": middle["p95"],
        "cpu_p50": cpu_summary["p50"],
        "opened_rss": opened,
        "serve_rss": mem["VmRSS"],
        "serve_hwm": mem["VmHWM"],
        "serve_anon": mem["RssAnon"],
        "serve_file": mem["RssFile"],
    }


def _child(phase: str, data_dir: str, size: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--phase", phase, "--dir", data_dir, str(size)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(size: int, data_dir: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        where = data_dir or tmp
        Path(where).mkdir(parents=True, exist_ok=True)
        figures: dict[str, float] = {}
        print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
        if not Path(where, "names.json").exists():
            figures |= _child("build", where, size)
        figures |= _child("backfill", where, size)
        print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
        figures |= _child("serve", where, size)
        print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    f = figures
    print(
        "| tools | backfill: embedded (reused) | s (CPU s, all threads) | tools/s | peak RSS MiB"
        " | serve: RSS MiB opened / after searches (anonymous + file-backed) / peak"
        f" | hybrid p50 / p95 ms ({ROUNDS} rounds of {f['n']:.0f}, median) | CPU p50 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {size:,} | {f['embedded']:,.0f} ({f['reused']:,.0f})"
        f" | {f['backfill_s']:.0f} ({f['backfill_cpu_s']:.0f})"
        f" | {f['rate']:.0f} | {f['backfill_hwm']:.0f} | {f['opened_rss']:.0f} /"
        f" {f['serve_rss']:.0f} ({f['serve_anon']:.0f} + {f['serve_file']:.0f}) / {f['serve_hwm']:.0f}"
        f" | {f['p50']:.2f} / {f['p95']:.2f} | {f['cpu_p50']:.2f} |",
        flush=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("size", nargs="?", type=int, default=100_000)
    parser.add_argument("--dir", default=None, help="keep the database here (reused when built)")
    parser.add_argument("--phase", choices=("build", "backfill", "serve"), default=None)
    args = parser.parse_args()
    if args.phase is None:
        main(args.size, args.dir)
    else:
        phases = {
            "build": lambda rt, where: phase_build(rt, where, args.size),
            "backfill": phase_backfill,
            "serve": phase_serve,
        }
        print(json.dumps(asyncio.run(in_runtime(args.dir, phases[args.phase]))))
