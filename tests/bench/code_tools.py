"""Code over tools (issue 24): a script making 10 read calls against the same 10 calls made
directly, in the same run; the engine's start-up per run; the bytes each way puts in an
agent's context.

A real ``toolspoke serve`` with the code tools on and a real HTTP inventory upstream
(tests/support/items_upstream.py). Each round, interleaved so that the machine's drift
touches every way alike: (a) 10 ``use_tool`` calls of ``inv__getItem`` one after the other,
each its own stateless 2026-07-28 request; (b) one ``use_code`` script awaiting the same 10
calls one after the other; (c) one script awaiting them together (``Promise.all``). The
overhead of a script is (b) - (a): what the engine, the thread hop per call and the script's
own audit row cost, against the 9 round trips it spares. The engine's start-up is read from
each run's own audit row (``detail.engine_ms``: a context, the prelude, the script compiled)
and measured alone in process.

Run: ``.venv/bin/python tests/bench/code_tools.py [ROUNDS]`` (default 30). Prints figures.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from appliance.codemode import engine  # noqa: E402
from tests.support.accounts import install, query  # noqa: E402
from tests.support.clients import modern_tools_call  # noqa: E402
from tests.support.items_upstream import ItemsUpstream  # noqa: E402
from tests.support.servers import running_appliance  # noqa: E402

SEQUENTIAL = (
    "const out = []; for (let id = 1; id <= 10; id++) out.push((await inv__getItem({ id })).stock);"
    " return out;"
)
TOGETHER = (
    "const ids = [...Array(10).keys()].map((i) => i + 1);"
    " return (await Promise.all(ids.map((id) => inv__getItem({ id })))).map((it) => it.stock);"
)


def post(client: httpx.Client, url: str, key: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    headers, body = modern_tools_call(key, tool, arguments)
    got = client.post(url, json=body, headers=headers)
    got.raise_for_status()
    result: dict[str, Any] = got.json()["result"]
    assert result.get("isError") is False, result
    return result


def shown(result: dict[str, Any]) -> int:
    return sum(len(part.get("text", "").encode()) for part in result["content"])


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    upstream = ItemsUpstream()
    env = {"TOOLSPOKE_DEMO": "0", "TOOLSPOKE_HEALTH_INTERVAL_S": "0", "TOOLSPOKE_CODE_TOOLS": "1"}
    env["TOOLSPOKE_RATE_LIMIT"] = "100000"
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            running_appliance(Path(tmp) / "data", env=env) as app,
            httpx.Client(timeout=60) as client,
        ):
            install(app, "inv", upstream)  # type: ignore[arg-type]
            times: dict[str, list[float]] = {"direct": [], "script": [], "together": []}
            sizes: dict[str, int] = {}
            for i in range(rounds + 3):  # three rounds to warm up, not counted
                started = time.perf_counter()
                total = 0
                for n in range(1, 11):
                    total += shown(
                        post(
                            client,
                            app.mcp_url,
                            app.key,
                            "use_tool",
                            {"tool": "inv__getItem", "input": {"id": n}},
                        )
                    )
                direct = time.perf_counter() - started
                started = time.perf_counter()
                one = post(client, app.mcp_url, app.key, "use_code", {"code": SEQUENTIAL})
                script = time.perf_counter() - started
                started = time.perf_counter()
                post(client, app.mcp_url, app.key, "use_code", {"code": TOGETHER})
                together = time.perf_counter() - started
                if i >= 3:
                    times["direct"].append(direct * 1000)
                    times["script"].append(script * 1000)
                    times["together"].append(together * 1000)
                sizes = {"direct": total, "script": shown(one)}
            rows = query(
                app.data_dir, "SELECT detail FROM audit_log WHERE tool = 'use_code' AND detail IS NOT NULL"
            )
            engine_ms = [json.loads(r[0])["engine_ms"] for r in rows]
            gets = query(
                app.data_dir,
                "SELECT count(*) FROM audit_log WHERE code_run IS NOT NULL AND tool = 'inv__getItem'",
            )
    finally:
        upstream.close()
    alone = []
    for _ in range(200):
        started = time.perf_counter()
        out = engine.run("return 1", engine.Limits(), _NoCalls())
        alone.append((time.perf_counter() - started) * 1000)
        assert out.ok
    d, s, t = (p50(times[k]) for k in ("direct", "script", "together"))
    print(f"rounds: {rounds} (after 3 to warm up); inner calls audited with their run: {gets[0][0]}")
    print(f"10 read calls one by one (10 requests):     p50 {d:7.2f} ms  p90 {_p90(times['direct']):7.2f} ms")
    print(
        f"one use_code script, 10 awaited in turn:     p50 {s:7.2f} ms  p90 {_p90(times['script']):7.2f} ms"
    )
    print(
        f"one use_code script, 10 with Promise.all:    p50 {t:7.2f} ms  p90 {_p90(times['together']):7.2f} ms"
    )
    print(
        f"script over direct: {s - d:+.2f} ms for 10 calls ({(s - d) / 10:+.3f} ms a call);"
        f" together {t - d:+.2f} ms"
    )
    print(f"engine start-up per run (audit detail): p50 {p50(engine_ms):.2f} ms, max {max(engine_ms):.2f} ms")
    print(f"a whole run of `return 1` in process (engine only): p50 {p50(alone):.3f} ms")
    print(
        f"bytes in the agent's context: one by one {sizes['direct']}, one script {sizes['script']}"
        f" ({sizes['script'] / sizes['direct']:.1%})"
    )
    return 0


def _p90(xs: list[float]) -> float:
    return sorted(xs)[int(len(xs) * 0.9) - 1]


class _NoCalls:
    def submit(self, name: str, arguments: str) -> Any:
        raise AssertionError("no calls here")

    def cancelled(self) -> bool:
        return False

    def paused(self) -> float:
        return 0.0


if __name__ == "__main__":
    sys.exit(main())
