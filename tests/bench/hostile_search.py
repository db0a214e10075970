"""Worst-case ``search_tools`` time on hostile queries, up to the query size limit and past it.

Run from the repo root: ``.venv/bin/python tests/bench/hostile_search.py [sizes...]``.

Each text is built to be the worst case of one pass over query text: a run of capitals (the
acronym split backtracked over the whole run: a 30 KB one took 97 s before dcf378c), camelCase
words run together, alternating case, letters and digits, runs of identifier separators,
joiners between words, spaces, non-ASCII letters, combining marks, CJK, emoji. Each goes in as
``query`` and as a full ``queries`` (five use cases, each with ``known_fields`` of the same
size, so the largest message the caps let through). Timing is the bridge's ``search_tools``
(``call_bridge``: argument checks, tokenising, the lexical query, suggestions) on a catalogue
of 200 tools, as an agent's call runs; a size over the limit reports how long its refusal
took. Prints every (size, field, shape) time above 5 ms (wall, and this process's CPU: a
loaded machine stretches the first, not the second), then one line per size with the worst
and its time; not a test.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance import config
from appliance.errors import ApplianceError
from appliance.gateway.bridge import call_bridge
from appliance.gateway.imports import import_catalog
from appliance.gateway.runtime import Runtime
from appliance.models import OPERATOR
from appliance.search.text import MAX_QUERY_CHARS


def _fit(unit: str) -> Callable[[int], str]:
    return lambda n: (unit * (n // len(unit) + 1))[:n]


SHAPES: dict[str, Callable[[int], str]] = {
    "capitals": lambda n: "A" * n,
    "capitals+lower": lambda n: "A" * (n - 1) + "a",
    "camelCase run": _fit("getHttpResponseCode"),
    "acronym words": _fit("HTTPResponseURLParser"),
    "aA": _fit("aA"),
    "a1": _fit("a1"),
    "digits": lambda n: "9" * n,
    "separators": lambda n: "a" + "_" * (n - 2) + "!",
    "mixed separators": _fit("a_-./:\\"),
    "joined": _fit("a_"),
    "spaces": lambda n: " " * (n - 1) + "x",
    "words": _fit("list pets "),
    "non-ascii": _fit("ÄÖü"),
    "combining marks": _fit("e\u0301"),
    "cjk": _fit("宠物列表"),
    "emoji": _fit("🐶🐱"),
    "quotes and stars": _fit('"*(-'),
}
FIELDS = ("query", "queries (5 x use_case + known_fields)")
DEFAULT_SIZES = (1_000, MAX_QUERY_CHARS, MAX_QUERY_CHARS + 1, 30_000)


def _arguments(field: str, text: str) -> dict[str, Any]:
    if field == "query":
        return {"query": text}
    # known_fields must be key:value pairs: the hostile text is the key, cut to the same size.
    known = (text[: max(1, len(text) - 2)] + ":v")[: len(text)]
    return {"queries": [{"use_case": text, "known_fields": known} for _ in range(5)]}


async def main(sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "c.jsonl"
        verbs = ("list", "get", "create", "deleteAll", "HTTPFetch", "parseURLPath", "update_by_id", "sendSMS")
        lines = [
            {
                "toolkit": "pets",
                "name": f"{verbs[i % len(verbs)]}Pets{i}",
                "description": f"{verbs[i % len(verbs)]} the pets in store number {i}.",
            }
            for i in range(200)
        ]
        source.write_text("".join(json.dumps(line) + "\n" for line in lines))
        settings = config.load(cli={"data_dir": str(Path(tmp) / "data")}, env={})
        rt = Runtime(settings)
        await rt.open()
        try:
            await import_catalog(rt, str(source), slug="pets")
            print(f"query size limit: {MAX_QUERY_CHARS} characters per field", flush=True)
            for size in sizes:
                worst, worst_cpu, worst_case, outcome = 0.0, 0.0, "", ""
                for field in FIELDS:
                    for shape, make in SHAPES.items():
                        args = _arguments(field, make(size))
                        start, cpu = time.perf_counter(), time.process_time()
                        try:
                            result = await call_bridge(rt, OPERATOR, "search_tools", args)
                            status = "error" if result.is_error else "ok"
                        except ApplianceError as exc:
                            status = f"refused ({exc.reason})"
                        took, spent = time.perf_counter() - start, time.process_time() - cpu
                        if took > 0.005:
                            print(f"  {size:>6} {field[:7]:<7} {shape:<17} {took * 1000:8.1f} ms"
                                  f" (cpu {spent * 1000:6.1f} ms)  {status}")  # fmt: skip
                        if took > worst:
                            worst, worst_cpu, worst_case, outcome = (
                                took,
                                spent,
                                f"{field[:7]}, {shape}",
                                status,
                            )
                line = (
                    f"{size:>8} chars: worst {worst * 1000:10.1f} ms (cpu {worst_cpu * 1000:.1f} ms)"
                    f"  ({worst_case}, {outcome})"
                )
                print(line, flush=True)
        finally:
            await rt.close()


if __name__ == "__main__":
    asyncio.run(main([int(a) for a in sys.argv[1:]] or list(DEFAULT_SIZES)))
