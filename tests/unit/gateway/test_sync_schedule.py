"""The re-sync scheduler: a burst of tools/list_changed notices becomes one re-sync, never a wait."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from appliance.gateway import sync_schedule
from appliance.gateway.sync import SyncReport


def fake_runtime() -> Any:
    return SimpleNamespace(
        settings=SimpleNamespace(mcp_resync_s=0.0), mcp=SimpleNamespace(on_tools_changed=None)
    )


def test_a_burst_of_notices_is_one_resync_and_a_notice_during_it_is_one_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> None:
        rt = fake_runtime()
        scheduler = sync_schedule.ResyncScheduler(rt, debounce_s=0.0)
        calls: list[tuple[str, str]] = []
        entered, release = asyncio.Event(), asyncio.Event()

        async def resync(rt_: Any, slug: str, *, project: str) -> SyncReport:
            calls.append((project, slug))
            entered.set()
            await release.wait()
            return SyncReport(slug=slug, project=project)

        monkeypatch.setattr(sync_schedule, "resync_toolkit", resync)
        scheduler.start()
        assert rt.mcp.on_tools_changed == scheduler.request
        for _ in range(3):
            rt.mcp.on_tools_changed("default.kit")  # returns at once: never blocks a call
        await asyncio.wait_for(entered.wait(), 5)
        entered.clear()
        rt.mcp.on_tools_changed("default.kit")  # arrives while the re-sync runs
        release.set()
        await asyncio.wait_for(entered.wait(), 5)
        await asyncio.wait_for(_until(lambda: scheduler.runs == 2), 5)
        assert calls == [("default", "kit"), ("default", "kit")]
        await scheduler.aclose()
        assert rt.mcp.on_tools_changed is None

    asyncio.run(scenario())


def test_a_failing_resync_is_logged_and_the_scheduler_keeps_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        rt = fake_runtime()
        scheduler = sync_schedule.ResyncScheduler(rt, debounce_s=0.0)

        async def resync(rt_: Any, slug: str, *, project: str) -> SyncReport:
            raise RuntimeError("boom")

        monkeypatch.setattr(sync_schedule, "resync_toolkit", resync)
        scheduler.start()
        scheduler.request("default.kit")
        await asyncio.wait_for(_until(lambda: scheduler.runs == 1), 5)
        scheduler.request("p.other")
        await asyncio.wait_for(_until(lambda: scheduler.runs == 2), 5)
        scheduler.request("no-dot-key")  # not a pool key: ignored
        await scheduler.aclose()
        assert scheduler.runs == 2

    asyncio.run(scenario())


async def _until(check: Any) -> None:
    while not check():
        await asyncio.sleep(0)  # yield to the scheduler's tasks; bounded by the caller's wait_for
