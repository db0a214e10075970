"""Retrieval quality of the search agents get, on every public bench set (dev queries).

Run from the repo root: ``.venv/bin/python tests/bench/retrieval.py [--lexical-only]``. For each
data set in ``bench/data/retrieval/`` it makes a fresh data directory, runs the real CLI
(``toolspoke import catalog``, ``toolspoke backfill`` with the bundled local model, then
``toolspoke eval --json --ranking lexical|semantic|hybrid``: the same search as
``search_tools``), and prints Recall@1/5/10, nDCG@10, MRR and latency against the targets,
each set on its own catalogue and then on the pooled catalogue of all four. Backfill
throughput (tools per second) is printed too, and then the two-fold cross-validation
(``retrieval_cv.py``): hybrid nDCG@10 as shipped beside the figure with the query adapter and the
fusion's knobs learned on the other half of the queries, and each set with an adapter learned
from the other sets only.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import retrieval_cv

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "data" / "retrieval"
SETS = ("toolbench", "bfcl-live", "metatool", "livemcpbench")
NO_ADAPTER = "hybrid, no adapter"
# Full-dev targets. The hybrid row's adapter learned from these queries, so its target is checked
# on the row without it; issue 22's held-out targets (0.73 / 0.80 / 0.72 / 0.44) are judged on the
# cross-validated table printed last.
TARGET_NDCG = {
    "lexical": {"toolbench": 0.70, "bfcl-live": 0.71, "metatool": 0.60, "livemcpbench": 0.35},
    NO_ADAPTER: {"toolbench": 0.73, "bfcl-live": 0.80, "metatool": 0.70, "livemcpbench": 0.41},
}
RANKINGS = ("lexical", "semantic", "hybrid")


def toolspoke(data: str, *args: str, adapter: bool = True) -> str:
    env = {**os.environ, "TOOLSPOKE_DATA_DIR": data, "TOOLSPOKE_EMBEDDINGS": "local"}
    env["TOOLSPOKE_SEARCH_QUERY_ADAPTER"] = "true" if adapter else "false"
    done = subprocess.run(
        [sys.executable, "-m", "appliance", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"toolspoke {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def row(label: str, ranking: str, r: dict[str, object], name: str) -> str:
    lat = r["latency_ms"]
    assert isinstance(lat, dict)
    target = TARGET_NDCG.get(ranking, {}).get(name)
    mark = ""
    if target is not None and label == name:
        mark = f" (≥ {target:.2f} {'ok' if float(r['ndcg@10']) >= target else 'BELOW'})"  # type: ignore[arg-type]
    served = "" if r["ranking"] == ranking else f" [served {r['ranking']}]"
    return (
        f"| {label} | {ranking}{served} | {r['queries']} | {r['recall@1']:.3f} | {r['recall@5']:.3f} "
        f"| {r['recall@10']:.3f} | {r['ndcg@10']:.3f}{mark} | {r['mrr']:.3f} "
        f"| {lat['p50']:.2f} | {lat['p95']:.2f} |"
    )


def _rate(fill: dict[str, float]) -> str:
    return f"{fill['embedded']:.0f} tools in {fill['seconds']:.1f} s = {fill['tools_per_s']:.0f}/s"


def evaluate(data: str, name: str, rankings: tuple[str, ...]) -> dict[str, dict[str, object]]:
    """Each ranking's figures; hybrid also without the query adapter (search/adapter.py), which
    was learned from these very dev queries: the cross-validated table is its held-out figure."""
    queries = os.path.join(data, "queries-dev.jsonl")
    Path(queries).write_bytes(retrieval_cv.searchable(name))
    out = {rk: json.loads(toolspoke(data, "eval", queries, "--json", "--ranking", rk)) for rk in rankings}
    if "hybrid" in rankings:
        bare = toolspoke(data, "eval", queries, "--json", "--ranking", "hybrid", adapter=False)
        out[NO_ADAPTER] = {**json.loads(bare), "ranking": NO_ADAPTER}
    return out


def main() -> None:
    rankings = ("lexical",) if "--lexical-only" in sys.argv else RANKINGS
    header = "| catalogue | ranking | queries | R@1 | R@5 | R@10 | nDCG@10 (target) | MRR | p50 ms | p95 ms |"
    print(header)
    print("|---|---|---|---|---|---|---|---|---|---|")
    fills: list[str] = []
    own: dict[str, retrieval_cv.SetData] = {}
    pooled: dict[str, retrieval_cv.SetData] = {}
    for name in SETS:
        with tempfile.TemporaryDirectory() as data:
            toolspoke(data, "import", "catalog", str(BENCH / name / "catalog.jsonl"), "--slug", name)
            if rankings != ("lexical",):
                fill = json.loads(toolspoke(data, "backfill", "--json"))
                fills.append(f"{name}: {_rate(fill)}")
            for rk, r in evaluate(data, name, rankings).items():
                print(row(name, rk, r, name), flush=True)
            if rankings != ("lexical",):
                own.update(asyncio.run(retrieval_cv.gather(data, [name])))
    with tempfile.TemporaryDirectory() as data:
        for name in SETS:
            toolspoke(data, "import", "catalog", str(BENCH / name / "catalog.jsonl"), "--slug", name)
        if rankings != ("lexical",):
            fill = json.loads(toolspoke(data, "backfill", "--json"))
            fills.append(f"pooled: {_rate(fill)}")
        for name in SETS:
            for rk, r in evaluate(data, name, rankings).items():
                print(row(f"pooled: {name}", rk, r, name), flush=True)
        if rankings != ("lexical",):
            pooled = asyncio.run(retrieval_cv.gather(data, SETS))
    if fills:
        print("\nBackfill with the local model (1 onnxruntime thread): " + "; ".join(fills))
    if own:
        print(
            "\nHybrid nDCG@10, two-fold cross-validation of the fusion's knobs (halves by a hash of"
            " the query id; knobs chosen on one half by the mean of the sets, scored on the other):\n"
        )
        print(retrieval_cv.HEADER)
        print(retrieval_cv.report("", own, with_unseen=True))
        print(retrieval_cv.report("pooled: ", pooled))


if __name__ == "__main__":
    main()
