"""Services start in one stated order and stop in reverse; a failed start stops what started.

``Services`` is tested with recording services; ``Serving`` (the serving process's order) with
a real runtime on a temporary data directory and recording stand-ins for the web face's parts.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from appliance import config
from appliance.gateway import readiness
from appliance.gateway.lifecycle import Face, Serving
from appliance.gateway.runtime import Runtime
from appliance.gateway.services import Service, Services
from tests.support.servers import TEST_DEFAULTS

# The serving order, as gateway/lifecycle.py states it: the first stage before the server
# serves, the second once it serves. Stopping runs it backwards.
OPENING = (
    "log thread",
    "database",
    "vault",
    "semantic search",
    "ledger",
    "search usage log",
    "egress",
    "MCP sessions and stdio children",
    "interrupted calls",
    "expired results",
    "demo toolkit",
    "backups",
)
SERVING = (
    "ready line",
    "health monitor",
    "embedding backfill",
    "SSE streams",
    "re-sync scheduler",
    "shutdown guard",
)


class Boom(Exception):
    pass


def recording(name: str, events: list[str], *, fail_start: bool = False, fail_stop: bool = False) -> Service:
    async def start() -> None:
        events.append(f"start {name}")
        if fail_start:
            raise Boom(name)

    async def stop() -> None:
        events.append(f"stop {name}")
        if fail_stop:
            raise Boom(name)

    return Service(name, start, stop)


def test_services_start_in_order_and_stop_in_reverse() -> None:
    events: list[str] = []
    services = Services(recording(n, events) for n in "abc")
    asyncio.run(services.start())
    assert services.started == ("a", "b", "c")
    asyncio.run(services.stop())
    assert events == ["start a", "start b", "start c", "stop c", "stop b", "stop a"]
    assert services.started == ()


def test_a_service_that_fails_to_start_stops_those_already_started_and_the_rest_never_start() -> None:
    events: list[str] = []
    services = Services(
        [
            recording("a", events),
            recording("b", events),
            recording("c", events, fail_start=True),
            recording("d", events),
        ]
    )
    with pytest.raises(Boom, match="c"):
        asyncio.run(services.start())
    # c did not start, so it is not stopped; d was never started at all
    assert events == ["start a", "start b", "start c", "stop b", "stop a"]
    assert services.started == ()


def test_a_stop_that_fails_is_logged_and_the_services_below_it_still_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[str] = []
    services = Services(
        [recording("a", events), recording("b", events, fail_stop=True), recording("c", events)]
    )
    asyncio.run(services.start())
    with caplog.at_level(logging.ERROR, logger="appliance.gateway.services"):
        asyncio.run(services.stop())
    assert events[3:] == ["stop c", "stop b", "stop a"]
    assert "stopping b failed" in caplog.text


def test_stopping_twice_stops_each_service_once_and_starting_twice_is_refused() -> None:
    events: list[str] = []
    services = Services(recording(n, events) for n in "ab")
    asyncio.run(services.start())
    with pytest.raises(RuntimeError, match="already started"):
        asyncio.run(services.start())
    asyncio.run(services.stop())
    asyncio.run(services.stop())
    assert events == ["start a", "start b", "stop b", "stop a"]


def face(*, fail: str = "") -> Face:
    """Stand-ins for the web face's parts; the one named ``fail`` fails to start."""

    async def boom() -> None:
        raise Boom(fail)

    def part(name: str) -> Service:
        return Service(name, boom) if name == fail else Service(name)

    return Face(
        logs=part("log thread"),
        prepare=part("backups"),
        announce=part("ready line"),
        streams=part("SSE streams"),
        guard=part("shutdown guard"),
    )


def serving(tmp_path: Path, events: list[str], *, fail: str = "") -> Serving:
    settings = config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path / "data"), **TEST_DEFAULTS})

    def observe(event: str, name: str) -> None:
        events.append(f"{event} {name}")

    return Serving(Runtime(settings), face(fail=fail), observe=observe)


def test_the_serving_order_is_the_stated_one(tmp_path: Path) -> None:
    plan = serving(tmp_path, [])
    assert plan.opening.names == OPENING
    assert plan.serving.names == SERVING
    assert plan.names == OPENING + SERVING


def test_serving_starts_in_order_and_stops_in_reverse_around_the_servers_drain(tmp_path: Path) -> None:
    events: list[str] = []
    plan = serving(tmp_path, events)
    rt = plan.rt

    async def scenario() -> None:
        await plan.open()
        assert events == [f"start {n}" for n in OPENING]
        assert await readiness.problems(rt) == []  # the runtime is open before the server serves
        await plan.serve()
        assert events[len(OPENING) :] == [f"start {n}" for n in SERVING]
        assert rt.health.enforcing  # the health monitor runs
        assert rt.mcp.on_tools_changed is not None  # the re-sync scheduler listens
        del events[:]
        await plan.quiesce()  # the stop begins: the server has not drained yet
        assert events == [f"stop {n}" for n in reversed(SERVING)]
        assert not rt.health.enforcing
        assert rt.mcp.on_tools_changed is None
        assert await readiness.problems(rt) == []  # calls in flight still find an open runtime
        await plan.close()  # the server drained
        assert events == [f"stop {n}" for n in (*reversed(SERVING), *reversed(OPENING))]

    asyncio.run(scenario())


def test_a_failure_before_serving_stops_what_started_and_nothing_after_it_starts(tmp_path: Path) -> None:
    events: list[str] = []
    plan = serving(tmp_path, events, fail="backups")
    with pytest.raises(Boom, match="backups"):
        asyncio.run(plan.open())
    started = OPENING[: OPENING.index("backups")]
    assert events == [
        *(f"start {n}" for n in started),
        "start backups",
        *(f"stop {n}" for n in reversed(started)),
    ]
    assert plan.opening.started == ()


def test_a_failure_once_serving_stops_both_stages_for_no_stop_hook_will_run(tmp_path: Path) -> None:
    events: list[str] = []
    plan = serving(tmp_path, events, fail="SSE streams")

    async def scenario() -> None:
        await plan.open()
        with pytest.raises(Boom, match="SSE streams"):
            await plan.serve()

    asyncio.run(scenario())
    started = SERVING[: SERVING.index("SSE streams")]
    assert events[len(OPENING) :] == [
        *(f"start {n}" for n in started),
        "start SSE streams",
        *(f"stop {n}" for n in reversed(started)),
        *(f"stop {n}" for n in reversed(OPENING)),
    ]
    assert not plan.rt.health.enforcing
    assert plan.opening.started == () and plan.serving.started == ()
