"""The usage boost on a replayed log (issue 22 item 7), and what the log costs a call.

Run from the repo root: ``.venv/bin/python tests/bench/usage_replay.py [SET ...]``. For each
data set in ``bench/data/retrieval/`` it imports the catalogue and backfills it with the
bundled local model (the CLI, as ``retrieval.py`` does), then in one process:

1. scores the dev queries (hybrid, as ``toolspoke eval --ranking hybrid``) with the boost off,
   and on with an empty usage log: the figures must be identical (asserted);
2. simulates an agent on the first half of the dev queries (halves by a hash of the query id,
   ``retrieval_cv.fold_of``): it searches through the usage log as ``search_tools`` does, and
   calls the first relevant tool among the 10 shown (else nothing: a miss);
3. scores, boost off and on, the first half's queries asked again (repeated), the same
   queries paraphrased mechanically (words reversed, capitals, other punctuation and
   filler words: what the normalised key ignores), and the second half (never logged: the
   boost must leave it alone), and ``eval --from-usage`` on the log itself.

Then the call path's share: ``UsageLog.called`` (the only step a call takes) with no open
search, and with a caller's full quota of open searches (32), timed in a loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import retrieval
import retrieval_cv

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "data" / "retrieval"
SCORED = ("ndcg@10", "recall@1", "mrr")


def paraphrase(query: str) -> str:
    """The same need in other clothes: words reversed, capitals, punctuation and fillers."""
    words = query.replace(",", " ").replace(".", " ").replace("?", " ").split()
    return (
        "Please, could you: "
        + " ".join(w.upper() if i % 2 else w for i, w in enumerate(reversed(words)))
        + "?"
    )


def _figures(summary: dict[str, Any]) -> str:
    return " ".join(f"{k} {summary[k]:.3f}" for k in SCORED)


async def replay(data: str, name: str) -> dict[str, Any]:
    os.environ["TOOLSPOKE_EMBEDDINGS"] = "local"
    from appliance.cli.common import settings_for
    from appliance.gateway.evaluation import _keys, evaluate, evaluate_usage, read_queries
    from appliance.gateway.runtime import Runtime
    from appliance.gateway.searching import search
    from appliance.models import Principal

    # A search takes at most MAX_QUERY_CHARS (a bfcl-live prompt is longer): cut as an agent must.
    items = read_queries(retrieval_cv.searchable(name))
    first = [i for i in items if retrieval_cv.fold_of(i["id"]) == 0]
    second = [i for i in items if retrieval_cv.fold_of(i["id"]) == 1]
    rt = Runtime(settings_for(None, data_dir=data))
    await rt.open()
    off, on = rt.settings, dataclasses.replace(rt.settings, search_usage_boost=True)
    out: dict[str, Any] = {"set": name}
    try:

        async def both(queries: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
            rt.settings = off
            a = await evaluate(rt, queries, ranking="hybrid")
            rt.settings = on
            b = await evaluate(rt, queries, ranking="hybrid")
            return a, b

        dev_off, dev_empty = await both(items)
        assert all(dev_off[k] == dev_empty[k] for k in SCORED), (dev_off, dev_empty)
        out["dev"] = (dev_off, dev_empty)

        agent = Principal(1, "bench", False, "bench", agent_id=1, agent_name="replay")
        rt.settings = off
        calls = 0
        for item in first:
            outcome = await search(rt, item["query"], limit=10, max_limit=10, ranking="hybrid")
            tools = [r.tool for r in outcome.results]
            rt.usage.searched(agent, item["query"], [t.name for t in tools])
            hit = next((t for t in tools if set(_keys(t)) & set(item["gold"])), None)
            if hit is not None:
                rt.usage.called(agent, hit)
                calls += 1
        rt.usage.expire(everything=True)
        await rt.usage.flush()
        out["logged"] = (len(first), calls)
        out["repeated"] = await both(first)
        out["paraphrased"] = await both([{**i, "query": paraphrase(i["query"])} for i in first])
        out["unseen"] = await both(second)
        rt.settings = off
        usage_off = await evaluate_usage(rt, ranking="hybrid")
        rt.settings = on
        usage_on = await evaluate_usage(rt, ranking="hybrid")
        out["from_usage"] = (usage_off, usage_on)
    finally:
        rt.settings = off
        await rt.close()
    return out


def call_path_cost() -> str:
    """Microseconds per ``UsageLog.called``: no open search, and a caller's 32 open ones."""
    from appliance.config import load
    from appliance.gateway.usage import OPEN_PER_CALLER, UsageLog
    from appliance.models import Principal, Tool

    log = UsageLog(load(env={"TOOLSPOKE_DATA_DIR": tempfile.gettempdir()}), book=None)  # type: ignore[arg-type]
    agent = Principal(1, "bench", False, "bench", agent_id=1, agent_name="replay")
    tool = Tool(9, 1, "kit__zzz", "kit", "default", "zzz", "", "", "", "read", {}, None, {}, "openapi", None)
    n = 200_000

    def timed() -> float:
        started = time.perf_counter()
        for _ in range(n):
            log.called(agent, tool)
        return (time.perf_counter() - started) / n * 1e6

    empty = timed()
    log._start = lambda: None  # type: ignore[method-assign]
    for i in range(OPEN_PER_CALLER):
        log.searched(agent, f"query {i}", [f"kit__t{j}" for j in range(10)])
    full = timed()
    return f"UsageLog.called: {empty:.2f} µs with no open search, {full:.2f} µs with {OPEN_PER_CALLER} open"


def main(sets: list[str]) -> None:
    print(call_path_cost(), flush=True)
    print("\n| set | queries | dev: off | dev: boost on, empty log | logged (calls) |")
    print("|---|---|---|---|---|")
    results = []
    for name in sets:
        with tempfile.TemporaryDirectory() as data:
            retrieval.toolspoke(
                data, "import", "catalog", str(BENCH / name / "catalog.jsonl"), "--slug", name
            )
            json.loads(retrieval.toolspoke(data, "backfill", "--json"))
            r = asyncio.run(replay(data, name))
        results.append(r)
        a, b = r["dev"]
        print(
            f"| {name} | {a['queries']} | {_figures(a)} | {_figures(b)}"
            f" | {r['logged'][0]} ({r['logged'][1]}) |"
        )
    print("\n| set | queries asked | nDCG@10 off → on | R@1 off → on | MRR off → on |")
    print("|---|---|---|---|---|")
    for r in results:
        for label in ("repeated", "paraphrased", "unseen", "from_usage"):
            a, b = r[label]
            cells = " | ".join(f"{a[k]:.3f} → {b[k]:.3f}" for k in SCORED)
            print(f"| {r['set']}: {label} | {a['queries']} | {cells} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or list(retrieval.SETS))
