"""Prometheus metrics: what the call path counts and times, and what a scrape reads fresh.

prometheus_client formats the text (never by hand). One registry per process: the serving
appliance is one process; the CLI never serves it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from appliance.catalogue import toolkit_reads
from appliance.gateway.runtime import Runtime
from appliance.ledger import windows

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

CALLS = Counter(
    "toolspoke_tool_calls",
    "Authenticated tools/call attempts by toolkit, tool kind and outcome.",
    ["toolkit", "kind", "outcome"],
    registry=REGISTRY,
)
CALL_SECONDS = Histogram(
    "toolspoke_tool_call_seconds",
    "Time of a whole tool call through the gateway (accounting and audit included).",
    ["toolkit"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
UPSTREAM_SECONDS = Histogram(
    "toolspoke_upstream_seconds",
    "Time spent waiting for the upstream in a tool call.",
    ["toolkit"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
APPROVALS = Counter(
    "toolspoke_approvals",
    "Call approval events (issue 20): requested, granted, denied, expired, used.",
    ["event"],
    registry=REGISTRY,
)
_CHILDREN: dict[tuple[Any, tuple[str, ...]], Any] = {}


def child(metric: Any, *labels: str) -> Any:
    """``metric.labels(*labels)``, remembered. prometheus_client checks the values and takes
    a lock on every ``labels`` call; a tool call makes three. Only for metrics never
    ``clear()``-ed (a cleared child would go on counting where no scrape sees it); their
    label sets are bounded by the catalogue, and prometheus_client keeps every child anyway.
    """
    key = (metric, labels)
    found = _CHILDREN.get(key)
    if found is None:
        found = _CHILDREN[key] = metric.labels(*labels)
    return found


SEARCH_SECONDS = Histogram(
    "toolspoke_search_seconds", "Time of a search_tools call.", buckets=_LATENCY, registry=REGISTRY
)
RATE_LIMITED = Counter(
    "toolspoke_rate_limited",
    "Requests refused by the rate limiter (scope: call or browse).",
    ["scope"],
    registry=REGISTRY,
)
HEALTH = Gauge(
    "toolspoke_toolkit_health",
    "1 for each toolkit's current upstream health state.",
    ["project", "toolkit", "state"],
    registry=REGISTRY,
)
QUOTA_USED = Gauge(
    "toolspoke_quota_used",
    "Use of a toolkit's current UTC window (calls or credits, per its unit), calls in flight included.",
    ["toolkit", "window", "unit"],
    registry=REGISTRY,
)
QUOTA_LIMIT = Gauge(
    "toolspoke_quota_limit",
    "A toolkit's ceiling for the window (0: none).",
    ["toolkit", "window", "unit"],
    registry=REGISTRY,
)


@contextmanager
def timed_search() -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        SEARCH_SECONDS.observe(time.perf_counter() - started)


async def scrape(rt: Runtime) -> bytes:
    """The text exposition, with health and quota gauges read now."""
    async with rt.db.read() as conn:
        kits = await toolkit_reads.healths(conn)
    HEALTH.clear()
    QUOTA_USED.clear()
    QUOTA_LIMIT.clear()
    now = time.time()
    spans = (windows.day(now), windows.month(now))
    for kit in kits:
        HEALTH.labels(kit["project"], kit["slug"], kit["health"]).set(1)
        price = rt.book.prices.get(int(kit["id"]))
        if price is None:
            continue  # not called since start: nothing in flight, nothing to show yet
        for span, limit in zip(spans, (price.daily, price.monthly), strict=True):
            tally = rt.book.tally(price.toolkit_id, span)
            if tally is None:
                continue
            if price.unit == "calls":
                used, ceiling = float(tally.calls + tally.held_calls), float(limit)
            else:  # millicredits → credits
                used, ceiling = (tally.milli + tally.held_milli) / 1000, limit / 1000
            QUOTA_USED.labels(kit["slug"], span.name, price.unit).set(used)
            QUOTA_LIMIT.labels(kit["slug"], span.name, price.unit).set(ceiling)
    return generate_latest(REGISTRY)
