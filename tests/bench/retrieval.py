"""Retrieval quality of the search agents get, on every public bench set (dev queries).

Run from the repo root: ``.venv/bin/python tests/bench/retrieval.py``. For each data set in
``../shared/bench/retrieval/`` it makes a fresh data directory, runs the real CLI
``toolspoke import catalog`` and ``toolspoke eval --json`` (the same search as
``search_tools``), and prints Recall@1/5/10, nDCG@10, MRR and latency against the targets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO.parent / "shared" / "bench" / "retrieval"
SETS = ("toolbench", "bfcl-live", "metatool", "livemcpbench")
TARGET_NDCG = {"toolbench": 0.70, "bfcl-live": 0.71, "metatool": 0.60, "livemcpbench": 0.35}


def toolspoke(data: str, *args: str) -> str:
    env = {**os.environ, "TOOLSPOKE_DATA_DIR": data}
    done = subprocess.run(
        [sys.executable, "-m", "appliance", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"toolspoke {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def evaluate(name: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as data:
        toolspoke(data, "import", "catalog", str(BENCH / name / "catalog.jsonl"), "--slug", name)
        return json.loads(toolspoke(data, "eval", str(BENCH / name / "queries-dev.jsonl"), "--json"))


def main() -> None:
    print("| data set | queries | R@1 | R@5 | R@10 | nDCG@10 (target) | MRR | p50 ms | p95 ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in SETS:
        r = evaluate(name)
        lat = r["latency_ms"]
        assert isinstance(lat, dict)
        ok = "ok" if float(r["ndcg@10"]) >= TARGET_NDCG[name] else "BELOW"  # type: ignore[arg-type]
        print(
            f"| {name} | {r['queries']} | {r['recall@1']:.3f} | {r['recall@5']:.3f} | {r['recall@10']:.3f} "
            f"| {r['ndcg@10']:.3f} (≥ {TARGET_NDCG[name]:.2f} {ok}) | {r['mrr']:.3f} | {lat['p50']:.2f} "
            f"| {lat['p95']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
