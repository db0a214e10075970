"""The screening's two measures, shared by its unit tests and tests/bench/screening.py.

- the poisoned set (``tests/fixtures/poisoned/cases.jsonl``, written for the tests): each case
  must be flagged with its category (recall), each benign one not at all;
- the real tools of the retrieval catalogues (``bench/data/retrieval/*/catalog.jsonl``, about
  3,700 tools from public sources): each data set installed as if its toolkits were imported
  side by side, so the imitation check compares every name with every other toolkit's.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.catalogue import screening
from appliance.catalogue.naming import sanitise_action

ROOT = Path(__file__).resolve().parents[2]
POISONED = ROOT / "tests" / "fixtures" / "poisoned" / "cases.jsonl"
RETRIEVAL = ROOT / "bench" / "data" / "retrieval"


def poisoned_cases() -> list[dict[str, Any]]:
    return [json.loads(line) for line in POISONED.read_text(encoding="utf-8").splitlines() if line.strip()]


def screen_case(case: dict[str, Any]) -> list[screening.Finding]:
    index = screening.NameIndex(
        screening.Installed(k["slug"], tuple(k["names"])) for k in case.get("installed", [])
    )
    names = index.imitations(case["slug"], [case["name"]])
    own = screening.screen_tool(
        case["name"], case.get("title", ""), case["description"], case["input_schema"]
    )
    return screening.merge(own, names.get(case["name"], []))


@dataclass
class Outcome:
    tools: int
    flagged: list[tuple[str, str, str, list[screening.Finding]]]  # (data set, toolkit, name, findings)
    seconds: float  # CPU time of this process: other work on a shared machine does not count

    @property
    def rate(self) -> float:
        return len(self.flagged) / self.tools


def _slug(toolkit: str) -> str:
    return sanitise_action(toolkit).lower().replace("_", "-").strip("-")[:31] or "kit"


def real_catalogues() -> dict[str, list[dict[str, Any]]]:
    return {
        d.name: [json.loads(line) for line in (d / "catalog.jsonl").read_text(encoding="utf-8").splitlines()]
        for d in sorted(RETRIEVAL.iterdir())
        if (d / "catalog.jsonl").is_file()
    }


def screen_catalogues(catalogues: dict[str, list[dict[str, Any]]]) -> Outcome:
    started = time.process_time()
    total, flagged = 0, []
    for data_set, rows in catalogues.items():
        kits: dict[str, list[str]] = {}
        for r in rows:
            kits.setdefault(r["toolkit"], []).append(r["name"])
        index = screening.NameIndex(screening.Installed(_slug(k), tuple(v)) for k, v in kits.items())
        names = {k: index.imitations(_slug(k), v) for k, v in kits.items()}
        for r in rows:
            total += 1
            own = screening.screen_tool(r["name"], "", r["description"], r.get("input_schema"))
            found = screening.merge(own, names[r["toolkit"]].get(r["name"], []))
            if found:
                flagged.append((data_set, r["toolkit"], r["name"], found))
    return Outcome(total, flagged, time.process_time() - started)
