"""Tool-description screening: recall on the poisoned set, false positives on real tools, speed.

Run from the repo root: ``.venv/bin/python tests/bench/screening.py``.

- recall: the poisoned set written for the tests (``tests/fixtures/poisoned/``), per category;
  a case counts when its category is among the findings;
- false positives: the real tools of the retrieval catalogues (``bench/data/retrieval/``),
  each data set's toolkits installed side by side (so names are compared across toolkits),
  with every flagged tool listed;
- time per 1,000 tools: the whole screening (text and names) over the real tools, best of five,
  and one call on a 1 MB hostile description (CPU time: a shared machine's load does not count).

Prints figures; not a test (``tests/unit/catalogue/test_screening.py`` asserts the bounds).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance.catalogue import screening
from tests.support.screening_sets import poisoned_cases, real_catalogues, screen_case, screen_catalogues


def recall() -> None:
    cases = poisoned_cases()
    total: Counter[str] = Counter()
    hit: Counter[str] = Counter()
    benign_flagged = 0
    for case in cases:
        found = {f.category for f in screen_case(case)}
        if case["category"] == "benign":
            benign_flagged += bool(found)
            continue
        total[case["category"]] += 1
        hit[case["category"]] += case["category"] in found
    print("| category | cases | flagged | recall |\n|---|---|---|---|")
    for category in sorted(total):
        print(f"| {category} | {total[category]} | {hit[category]} | {hit[category] / total[category]:.1%} |")
    n, h = sum(total.values()), sum(hit.values())
    print(f"| **all** | {n} | {h} | {h / n:.1%} |")
    benign = sum(1 for c in cases if c["category"] == "benign")
    print(f"\nbenign near misses flagged: {benign_flagged}/{benign}")


def false_positives() -> None:
    catalogues = real_catalogues()
    outcome = screen_catalogues(catalogues)
    print("\n| data set | tools | flagged |\n|---|---|---|")
    for name, rows in catalogues.items():
        print(f"| {name} | {len(rows)} | {sum(1 for f in outcome.flagged if f[0] == name)} |")
    print(f"| **all** | {outcome.tools} | {len(outcome.flagged)} ({outcome.rate:.2%}) |\n")
    for data_set, toolkit, name, found in outcome.flagged:
        reasons = "; ".join(f"{f.category}: {f.reason} [{f.evidence}]" for f in found)
        print(f"- {data_set} / {toolkit} / {name}: {reasons}")


def speed() -> None:
    catalogues = real_catalogues()
    best = min(screen_catalogues(catalogues).seconds for _ in range(5))
    tools = sum(len(rows) for rows in catalogues.values())
    print(f"\nCPU time per 1,000 tools (text and names, best of 5): {best / tools * 1000 * 1000:.1f} ms")
    hostile = "ignore previous " * 65_536  # 1 MiB of rule openers that never complete
    started = time.process_time()
    screening.screen_tool("t", "", hostile, {})
    print(f"one 1 MiB hostile description (screened on its first {screening.SCAN_MAX:,} characters):"
          f" {(time.process_time() - started) * 1000:.1f} ms CPU")  # fmt: skip


if __name__ == "__main__":
    recall()
    false_positives()
    speed()
