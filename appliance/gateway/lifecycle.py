"""The serving process's services, started in one order and stopped in the reverse one.

The order, stated once (``Serving.names``; ``tests/unit/gateway/test_lifecycle.py`` holds it):

    before the server serves          log thread; the runtime's parts (database, vault,
                                      semantic search, ledger, egress, MCP sessions and
                                      stdio children: ``Runtime.parts``); interrupted calls
                                      recovered; expired kept results pruned; the demo
                                      toolkit; the face's own state
    ---- the server serves ----
    once it serves                    the ready line (stop signals taken first); health
                                      monitor; embedding backfill; SSE streams; re-sync
                                      scheduler; shutdown guard

Stopping runs it backwards, in the same two stages around the server's own drain: when
the stop begins the shutdown guard stops taking work (new connections refused, kept-alive
ones closed after their answer), the background tasks end and open SSE streams close;
then the server waits (up to ``shutdown_grace_s``) for the calls in flight, and only then
do the runtime's parts close (children, egress, the ledger's queued rows, the database)
and the log thread write its last lines. So a call still running at SIGTERM finishes on
an open runtime, and no background task outlives the database it writes to.

The face that serves (``web/app.py``) hands in its own parts (``Face``) and calls the four
stage steps from its one start and one stop hook per side of the server's drain; it
decides nothing about the order.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.gateway import artifacts, idempotency, imports
from appliance.gateway.backfill import BackfillTask
from appliance.gateway.health import HealthMonitor
from appliance.gateway.runtime import Runtime
from appliance.gateway.services import Observer, Service, Services, at_once
from appliance.gateway.sync_schedule import ResyncScheduler


@dataclass(frozen=True)
class Face:
    """The parts of the face that serves, each in the place the order gives it."""

    logs: Service  # log lines written by a thread: first up, last down
    prepare: Service  # the face's own state, ready before the first request
    announce: Service  # once serving: stop signals taken, then the ready line
    streams: Service  # long-lived streams, ended when the stop begins
    guard: Service  # stops taking work: the first to stop


class Serving:
    def __init__(self, rt: Runtime, face: Face, *, observe: Observer | None = None) -> None:
        self.rt = rt
        health, backfill, resync = HealthMonitor(rt), BackfillTask(rt), ResyncScheduler(rt)
        self.opening = Services(
            (
                face.logs,
                *rt.parts(),
                # Keys whose call a killed process left running: never run again (LEDGER-05/06).
                Service("interrupted calls", lambda: _recover(rt)),
                # Kept results past their lifetime (every store prunes too: gateway/artifacts.py).
                Service("expired results", lambda: artifacts.prune(rt)),
                # Answered in process, at its own origin (gateway/demo_api.py).
                Service("demo toolkit", lambda: imports.ensure_demo(rt)),
                face.prepare,
            ),
            observe=observe,
        )
        self.serving = Services(
            (
                face.announce,
                Service("health monitor", at_once(health.start), health.aclose),
                Service("embedding backfill", at_once(backfill.start), backfill.stop),
                face.streams,
                Service("re-sync scheduler", at_once(resync.start), resync.aclose),
                face.guard,
            ),
            observe=observe,
        )

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.opening.names, *self.serving.names)

    async def open(self) -> None:
        """Before the server serves."""
        await self.opening.start()

    async def serve(self) -> None:
        """Once the server serves. A failure here also closes the first stage: a server whose
        start failed runs no stop hook."""
        try:
            await self.serving.start()
        except BaseException:
            await self.opening.stop()
            raise

    async def quiesce(self) -> None:
        """When the stop begins, before the server drains its calls in flight."""
        await self.serving.stop()

    async def close(self) -> None:
        """After the server drained (or cut off) its calls in flight."""
        await self.serving.stop()  # nothing left, unless the stop skipped quiesce
        await self.opening.stop()


async def _recover(rt: Runtime) -> None:
    await idempotency.recover(rt)
