"""Rate limits over real HTTP (RELIABILITY RATE-01, RATE-05).

RATE-01: one agent fires 200 paid calls at once against an instant upstream; the bucket
admits its burst and refuses the rest fast, with a ``retry_after_s`` that is never too
short, and the refused calls reach no upstream, cost nothing and are counted in metrics and
audit. RATE-05: one agent floods the cheap methods and opens streams beyond its cap, while
another agent is still served.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.accounts import MeteredUpstream, add_user_keys, admin, credits_path, install, query
from tests.support.clients import MODERN, modern_tools_call
from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e
ENV = {"TOOLSPOKE_DEMO": "0", "TOOLSPOKE_HEALTH_INTERVAL_S": "0", "TOOLSPOKE_IMPORTS_PER_HOUR": "1000"}
BURST = 120  # TOOLSPOKE_RATE_LIMIT's default: a full bucket
BROWSE = 40


@pytest.fixture(scope="module")
def upstream() -> Iterator[MeteredUpstream]:
    meter = MeteredUpstream()
    yield meter
    meter.close()


def _rate_limited_total(app: Appliance, scope: str) -> float:
    text = httpx.get(
        app.base_url + "/metrics", headers={"Authorization": f"Bearer {app.key}"}, timeout=30
    ).text
    found = re.search(rf'^toolspoke_rate_limited_total{{scope="{scope}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


async def _timed_post(
    http: httpx.AsyncClient, headers: dict[str, str], body: dict[str, Any]
) -> tuple[float, float, Any]:
    started = time.perf_counter()
    r = await http.post("/mcp", json=body, headers=headers)
    return started, time.perf_counter() - started, r.json()


def test_two_hundred_calls_in_a_second_admit_the_burst_and_refuse_the_rest_fast_and_free(
    tmp_path: Path, upstream: MeteredUpstream
) -> None:
    """RATE-01: 200 calls from one agent at once; at most the burst (plus the trickle) admitted."""
    data = tmp_path / "data"
    with running_appliance(data, env=ENV) as app:
        (key,) = add_user_keys(data, "flood", 1, agents=True)
        assert admin(app, "POST", credits_path(app, "flood"), {"amount": 1000}).status_code == 201
        tool = install(app, "meter", upstream, fee=1)
        refused_before = _rate_limited_total(app, "call")
        headers, body = modern_tools_call(key, tool)
        retried: list[Any] = []

        async def flood() -> tuple[list[tuple[float, float, Any]], float, list[Any], Any, Any]:
            limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
            async with httpx.AsyncClient(base_url=app.base_url, timeout=60, limits=limits) as http:
                started = time.perf_counter()
                answers = await asyncio.gather(*(_timed_post(http, headers, body) for _ in range(200)))
                elapsed = time.perf_counter() - started
                # Once the bucket is empty, refusals one at a time: the time a caller waits for
                # one (the flood's own figures include queueing behind 200 requests at once).
                alone = [await _timed_post(http, headers, body) for _ in range(20)]
                # retry_after_s is never too short: asking again after it, the call goes through.
                # It is measured from the latest answer; if the trickle admitted that one, the
                # token an earlier refusal pointed at is spent, so ask until refused again.
                # Those asks count too: each is admitted or refused like any other.
                latest = alone[-1]
                for _ in range(20):
                    if "error" in latest[2]:
                        break
                    latest = await _timed_post(http, headers, body)
                    retried.append(latest[2])
                last_at, last_took, last = latest
                assert "error" in last, last
                wait = last["error"]["data"]["retry_after_s"]
                await asyncio.sleep(max(0.0, last_at + last_took + wait - time.perf_counter()))
                _, _, after = await _timed_post(http, headers, body)
                return answers, elapsed, alone, wait, after

        answers, elapsed, alone, wait, after = asyncio.run(flood())
        admitted = [took for _, took, doc in answers if "result" in doc and not doc["result"]["isError"]]
        refused = [took for _, took, doc in answers if doc.get("error", {}).get("code") == -32001]
        assert len(admitted) + len(refused) == 200
        # A full bucket is the burst; GCRA then adds one call every 0.5 s.
        assert BURST <= len(admitted) <= BURST + int(elapsed * 2) + 1, (len(admitted), elapsed)
        assert 0 < wait <= 0.5 + 1e-3
        assert "result" in after and after["result"]["isError"] is False, after
        single = sorted(took for _, took, doc in alone if "error" in doc)
        extra = len(alone) - len(single)  # the trickle may admit one of them
        assert len(single) >= 18 and extra <= 2
        refused_after = _rate_limited_total(app, "call")
    served = sorted(
        row[0] for row in query(data, "SELECT duration_ms FROM audit_log WHERE outcome = 'rate_limited'")
    )
    refused.sort()
    print(
        f"\nRATE-01: {len(admitted)} admitted, {len(refused)} refused of 200 in {elapsed:.2f} s (client "
        f"p50 {refused[len(refused) // 2] * 1000:.0f} ms, max {refused[-1] * 1000:.0f} ms, queueing "
        f"included); a refusal alone p50 {single[len(single) // 2] * 1000:.1f} ms, max "
        f"{single[-1] * 1000:.1f} ms; gateway time (audit) p95 {served[int(len(served) * 0.95)]:.2f} ms"
    )
    # A refusal does no I/O but its audit row's commit; generous bounds for a loaded machine.
    assert single[-1] < 0.25, single
    assert served[int(len(served) * 0.95)] < 50
    retried_refused = sum(1 for doc in retried if "error" in doc)
    total_refused = len(refused) + len(single) + retried_refused
    total_admitted = len(admitted) + extra + (len(retried) - retried_refused) + 1
    assert refused_after - refused_before == total_refused
    # No upstream, no charge, no quota for a refusal; each is audited.
    assert upstream.paths["/hit"] == total_admitted
    assert query(data, "SELECT outcome, count(*), sum(fee_milli) FROM audit_log GROUP BY 1 ORDER BY 1") == [
        ("ok", total_admitted, total_admitted * 1000),
        ("rate_limited", total_refused, 0),
    ]
    assert query(data, "SELECT count(*) FROM ledger_entries WHERE kind = 'charge'") == [(total_admitted,)]


def _rpc(
    key: str, method: str, *, modern: bool, session: str | None = None
) -> tuple[dict[str, str], dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    params: dict[str, Any] = {}
    if modern:
        headers.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "flood", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    elif method == "initialize":
        params = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "f", "version": "1"},
        }
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return headers, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def test_flooding_cheap_methods_and_streams_is_limited_per_agent_and_another_agent_is_still_served(
    tmp_path: Path, upstream: MeteredUpstream
) -> None:
    """RATE-05 / RATE-03 / I-8: tools/list, initialize, ping and server/discover count under the
    browse limit, SSE streams are capped per key, and another agent is served meanwhile."""
    data = tmp_path / "data"
    env = {
        **ENV,
        "TOOLSPOKE_BROWSE_RATE_LIMIT": str(BROWSE),
        "TOOLSPOKE_MAX_STREAMS_PER_KEY": "3",
        "TOOLSPOKE_MAX_SESSIONS_PER_KEY": "4",
    }
    with running_appliance(data, env=env) as app:
        flooder, other = add_user_keys(data, "flood", 2, agents=True)
        assert admin(app, "POST", credits_path(app, "flood"), {"amount": 1000}).status_code == 201
        tool = install(app, "meter", upstream, fee=1)

        async def scenario() -> dict[str, Any]:
            async with httpx.AsyncClient(base_url=app.base_url, timeout=60) as http:
                # A legacy session of the flooder's, to ping in.
                h, b = _rpc(flooder, "initialize", modern=False)
                first = await http.post("/mcp", json=b, headers=h)
                session = first.headers["mcp-session-id"]
                requests = [
                    _rpc(flooder, "tools/list", modern=True),
                    _rpc(flooder, "server/discover", modern=True),
                    _rpc(flooder, "initialize", modern=False),
                    _rpc(flooder, "ping", modern=False, session=session),
                    _rpc(flooder, "tools/list", modern=False, session=session),
                ]
                stop = asyncio.Event()
                timing: dict[str, float] = {}

                async def flood() -> list[dict[str, Any]]:
                    got = []
                    started = time.perf_counter()
                    for i in range(200):
                        h, b = requests[i % len(requests)]
                        got.append((await http.post("/mcp", json=b, headers=h)).json())
                    stop.set()
                    timing["flood_s"] = time.perf_counter() - started
                    return got

                async def served() -> list[float]:
                    took: list[float] = []
                    calls = 0
                    # Within its own buckets (BROWSE lists, BURST calls): only the flood may be
                    # refused here, and a fast gateway would otherwise run this agent's dry.
                    while not stop.is_set() and calls < BURST // 2:
                        # Its own browse bucket is BROWSE too: list a little, call a lot.
                        mix = [modern_tools_call(other, tool)]
                        calls += 1
                        if len(took) < BROWSE // 2:
                            mix.append(_rpc(other, "tools/list", modern=True))
                        for h, b in mix:
                            started = time.perf_counter()
                            r = await http.post("/mcp", json=b, headers=h)
                            took.append(time.perf_counter() - started)
                            assert r.status_code == 200 and "result" in r.json(), r.text
                            assert r.json()["result"].get("isError") in (None, False)
                    return took

                flooded, other_took = await asyncio.gather(flood(), served())
                streams = await _open_streams(app, flooder, other)
            return {"flooded": flooded, "other_took": other_took, **timing, **streams}

        outcome = asyncio.run(scenario())
    flooded = outcome["flooded"]
    limited = [d for d in flooded if d.get("error", {}).get("code") == -32001]
    assert all(d["error"]["data"]["scope"] == "browse" for d in limited)
    answered = len(flooded) - len(limited)
    # One initialize before the flood; the bucket of BROWSE then refuses nearly all of 200.
    trickle = int(outcome["flood_s"] * BROWSE / 60) + 1  # what the bucket regains meanwhile
    assert BROWSE - 2 <= answered <= BROWSE + trickle, (answered, outcome["flood_s"])
    assert {d["error"]["data"]["scope"] for d in limited} == {"browse"}
    print(
        f"\nRATE-05: flooder {answered} answered, {len(limited)} refused; the other agent's "
        f"{len(outcome['other_took'])} requests at most {max(outcome['other_took']) * 1000:.0f} ms"
    )
    # The other agent was served throughout, none of its requests waiting on the flood.
    assert len(outcome["other_took"]) >= 2 and max(outcome["other_took"]) < 2.0
    assert outcome["opened"] == 3 and outcome["refused_status"] == 429
    assert "TOOLSPOKE_MAX_STREAMS_PER_KEY" in outcome["refused_text"]
    assert outcome["other_stream"] == 200


async def _open_streams(app: Appliance, flooder: str, other: str) -> dict[str, Any]:
    """Open SSE streams with the flooder's key until refused, then one with the other's."""
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=app.base_url, timeout=30))
        opened = 0
        for _ in range(5):
            r = await stack.enter_async_context(
                http.stream("GET", "/sse", headers={"Authorization": f"Bearer {flooder}"})
            )
            if r.status_code != 200:
                refused_status, refused_text = r.status_code, (await r.aread()).decode()
                break
            opened += 1
        else:
            raise AssertionError("five streams were opened with one key")
        mine = await stack.enter_async_context(
            http.stream("GET", "/sse", headers={"Authorization": f"Bearer {other}"})
        )
        return {
            "opened": opened,
            "refused_status": refused_status,
            "refused_text": refused_text,
            "other_stream": mine.status_code,
        }
