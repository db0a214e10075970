"""When re-syncs happen by themselves: on ``tools/list_changed`` (debounced) and periodically.

Both run in background tasks owned by one ``ResyncScheduler``: a notification only marks
its toolkit dirty and, if no task is waiting for it, starts one, so a tool call whose
answer carried the notification is never held up. Servers often announce a burst of
changes (one per tool registered at start-up), hence the debounce: a toolkit is re-synced
once ``debounce_s`` after the first notice, and once more if notices arrived during that
re-sync. Failures are logged and retried at the next trigger; they never escape a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from appliance.catalogue import sync_store
from appliance.errors import ApplianceError
from appliance.gateway.runtime import Runtime
from appliance.gateway.sync import resync_toolkit

log = logging.getLogger(__name__)

DEBOUNCE_S = 1.0


class ResyncScheduler:
    def __init__(self, rt: Runtime, *, interval_s: float | None = None, debounce_s: float = DEBOUNCE_S):
        self.rt = rt
        self.interval_s = rt.settings.mcp_resync_s if interval_s is None else interval_s
        self.debounce_s = debounce_s
        self._waiting: dict[str, asyncio.Task[None]] = {}  # pool key → its debounced task
        self._dirty: set[str] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._closed = False
        self.runs = 0  # completed re-syncs (successful or not): for tests and logs

    def start(self) -> None:
        """Listen to the pool's notifications and start the periodic loop (interval 0: off)."""
        self.rt.mcp.on_tools_changed = self.request
        if self.interval_s > 0 and self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._periodic(), name="mcp-resync-loop")

    def request(self, key: str) -> None:
        """Schedule a re-sync of the toolkit whose pool key is ``<project>.<slug>``; returns at once."""
        if self._closed or "." not in key:
            return
        self._dirty.add(key)
        if key not in self._waiting:
            task = asyncio.get_running_loop().create_task(self._debounced(key), name=f"mcp-resync-{key}")
            self._waiting[key] = task

    async def _debounced(self, key: str) -> None:
        try:
            while key in self._dirty and not self._closed:
                await asyncio.sleep(self.debounce_s)
                self._dirty.discard(key)
                project, slug = key.split(".", 1)
                await self._resync(slug, project, why="tools/list_changed")
        finally:
            self._waiting.pop(key, None)

    async def _resync(self, slug: str, project: str, *, why: str) -> None:
        try:
            report = await resync_toolkit(self.rt, slug, project=project)
        except ApplianceError as exc:
            log.warning("re-sync of %s.%s (%s) failed: %s", project, slug, why, exc.public_message)
        except Exception:
            log.exception("re-sync of %s.%s (%s) failed", project, slug, why)
        else:
            changes = report.added + report.changed + report.removed + report.returned
            if changes:
                log.info(
                    "re-sync of %s.%s (%s): %d added, %d changed, %d removed, %d returned; %d pending",
                    project,
                    slug,
                    why,
                    len(report.added),
                    len(report.changed),
                    len(report.removed),
                    len(report.returned),
                    len(report.pending),
                )
        finally:
            self.runs += 1

    async def run_once(self) -> None:
        """Re-sync every MCP toolkit, one after another (one slow upstream delays the rest,
        but never more than its call deadline, and the loop never floods upstreams)."""
        async with self.rt.db.read() as conn:
            kits = await sync_store.mcp_toolkits(conn)
        for project, slug in kits:
            if self._closed:
                return
            await self._resync(slug, project, why="periodic")

    async def _periodic(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.interval_s)
            try:
                await self.run_once()
            except Exception:
                log.exception("the periodic MCP re-sync failed")

    async def aclose(self) -> None:
        """Stop listening and cancel every waiting or running re-sync (before the runtime closes)."""
        self._closed = True
        if self.rt.mcp.on_tools_changed == self.request:
            self.rt.mcp.on_tools_changed = None
        tasks = [*self._waiting.values(), *([self._loop_task] if self._loop_task else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._waiting.clear()
        self._loop_task = None


async def resync_loop(rt: Runtime) -> None:
    """The periodic re-sync as one coroutine (for callers that manage their own task)."""
    scheduler = ResyncScheduler(rt)
    scheduler.start()
    try:
        await asyncio.Event().wait()
    finally:
        await scheduler.aclose()
