"""What the search usage log costs an agent's call, in process (issue 22 item 7).

Run from the repo root: ``.venv/bin/python tests/bench/usage_call_cost.py [--rounds N]``.

One runtime over a fresh data directory with the demo toolkit (answered in process: no
socket), one keyed caller. Each step is what an agent does: ``search_tools`` for "list my
notes" (not timed), then ``use_tool`` on ``demo__listNotes`` (timed, from the bridge to the
durable audit row). The log is switched on and off in alternating slices of 200 steps, so the
machine's drift falls on both alike; the rows it settles are written every 2 s as a rider on
the ledger's commit, during the slices, as in service. Prints p50 and p90 of the call with
the log off and on.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time

SLICE = 200


async def measure(rounds: int) -> dict[bool, list[float]]:
    from appliance import config
    from appliance.gateway import bridge, imports
    from appliance.gateway.runtime import Runtime
    from appliance.models import Principal

    with tempfile.TemporaryDirectory() as data:
        env = {
            "TOOLSPOKE_DATA_DIR": data,
            "TOOLSPOKE_EMBEDDINGS": "none",
            "TOOLSPOKE_DEFAULT_FEE": "0",
            "TOOLSPOKE_RATE_LIMIT": "1000000",
            "TOOLSPOKE_BROWSE_RATE_LIMIT": "1000000",
        }
        rt = Runtime(config.load(env={**os.environ, **env}))
        await rt.open()
        try:
            await imports.ensure_demo(rt)
            caller = Principal(1, "bench", True, "bench")
            times: dict[bool, list[float]] = {False: [], True: []}
            for i in range(rounds * 2):
                on = i % 2 == 1
                rt.usage.enabled = on
                for _ in range(SLICE):
                    await bridge.call_bridge(rt, caller, "search_tools", {"query": "list my notes"})
                    started = time.perf_counter()
                    result = await bridge.call_bridge(rt, caller, "use_tool", {"tool": "demo__listNotes"})
                    times[on].append((time.perf_counter() - started) * 1e6)
                    assert not result.is_error, result
            await rt.usage.flush()
            written = await rt.db.reading(lambda r: r.one("SELECT count(*) FROM search_usage")[0])
            ranks = await rt.db.reading(
                lambda r: r.all("SELECT rank, count(*) FROM search_usage GROUP BY rank")
            )
            print(f"{written} searches logged; by rank: {[tuple(x) for x in ranks]}")
            return times
        finally:
            await rt.close()


def main() -> None:
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 10
    times = asyncio.run(measure(rounds))
    for on in (False, True):
        xs = sorted(times[on])
        p50, p90 = statistics.median(xs), xs[int(len(xs) * 0.9)]
        print(f"log {'on ' if on else 'off'}: {len(xs)} calls, p50 {p50:.0f} µs, p90 {p90:.0f} µs")


if __name__ == "__main__":
    main()
