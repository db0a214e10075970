"""Worst-case ``search_tools`` time on hostile queries, up to the query size limit and past it.

Run from the repo root: ``.venv/bin/python tests/bench/hostile_search.py [sizes...]``.

Each query is built to be the worst case of one pass over query text: a run of capitals (the
acronym split backtracked over the whole run), alternating case, letters and digits, runs of
identifier separators, joiners between words, non-ASCII letters. Timing is the bridge's
``search_tools`` (``call_bridge``: argument checks, tokenising, the lexical query, suggestions)
on a small catalogue, as an agent's call runs; a size over the limit reports how long its
refusal took. Prints one line per size with the worst shape and its time; not a test.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance import config
from appliance.errors import ApplianceError
from appliance.gateway.bridge import call_bridge
from appliance.gateway.imports import import_catalog
from appliance.gateway.runtime import Runtime
from appliance.models import OPERATOR

SHAPES = {
    "capitals": lambda n: "A" * n,
    "capitals+lower": lambda n: "A" * (n - 1) + "a",
    "aA": lambda n: "aA" * (n // 2),
    "a1": lambda n: "a1" * (n // 2),
    "separators": lambda n: "a" + "_" * (n - 2) + "!",
    "joined": lambda n: "a_" * (n // 2),
    "words": lambda n: ("list pets " * (n // 10 + 1))[:n],
    "non-ascii": lambda n: "ÄÖü" * (n // 3),
}
DEFAULT_SIZES = (1_000, 2_000, 4_000, 30_000)


async def main(sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "c.jsonl"
        lines = [
            {"toolkit": "pets", "name": f"listPets{i}", "description": "List the pets in the store."}
            for i in range(20)
        ]
        source.write_text("".join(json.dumps(line) + "\n" for line in lines))
        settings = config.load(cli={"data_dir": str(Path(tmp) / "data")}, env={})
        rt = Runtime(settings)
        await rt.open()
        try:
            await import_catalog(rt, str(source), slug="pets")
            for size in sizes:
                worst, worst_shape, outcome = 0.0, "", ""
                for shape, make in SHAPES.items():
                    query = make(size)
                    start = time.perf_counter()
                    try:
                        result = await call_bridge(rt, OPERATOR, "search_tools", {"query": query})
                        status = "error" if result.is_error else "ok"
                    except ApplianceError as exc:
                        status = f"refused ({exc.reason})"
                    took = time.perf_counter() - start
                    if took > worst:
                        worst, worst_shape, outcome = took, shape, status
                line = f"{size:>8} chars: worst {worst * 1000:10.1f} ms  ({worst_shape}, {outcome})"
                print(line, flush=True)
        finally:
            await rt.close()


if __name__ == "__main__":
    asyncio.run(main([int(a) for a in sys.argv[1:]] or list(DEFAULT_SIZES)))
