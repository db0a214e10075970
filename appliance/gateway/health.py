"""Health probes of upstream toolkits, and the background task that runs them.

What a probe may do is fixed by RELIABILITY D-10 / UP-11: never a tool call, never charged,
never counted against rate limits, always through the egress guard, always with a deadline.

- MCP over HTTP/SSE: ``ping`` (2025 era) or ``server/discover`` (2026-07-28) on the pooled
  session, opening it (``initialize``/``server/discover``) when there is none. A ``per_user``
  toolkit (``gateway/connections.py``) is probed with its shared credential if it has one,
  never with a person's: a 401 or 403 answer is an answer (reachable; each person's own
  connection is what its calls carry), not a failure.
- MCP over stdio: the supervisor's view of the child first. A stopped child is not
  started (that would keep every idle server alive forever); a running one gets a
  ``ping`` on its pooled session that does not count as traffic for its idle timer, so a
  child that runs but answers nothing (hung) turns degraded, then broken. A crashed child
  is restarted through the pool (its handshake is the probe), because a broken toolkit
  refuses calls and nothing else would ever start it again.
- OpenAPI: DNS through the guard plus a bare TCP connect (``egress/reach.py``); no HTTP
  request, because even a HEAD or GET may act, cost or count upstream.
- Catalogue toolkits have no upstream: not probed.

Probes of different toolkits run independently: a slow one (a stdio cold start may take a
minute) never delays the next round of the others.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from appliance.catalogue import store
from appliance.children.processes import State
from appliance.egress.reach import tcp_reachable
from appliance.errors import NotFound, UpstreamError
from appliance.gateway import credentials
from appliance.gateway.calls import pool_key
from appliance.gateway.health_machine import Health, HealthState, Outcome
from appliance.gateway.health_state import record
from appliance.gateway.runtime import Runtime
from appliance.models import Toolkit

log = logging.getLogger(__name__)

Verdict = tuple[Outcome, str] | None  # None: nothing to judge (not probed)
_DROP_SESSION = ("upstream_unavailable", "upstream_invalid")


def _failure(exc: UpstreamError) -> tuple[Outcome, str]:
    if exc.reason == "ssrf_blocked":
        return Outcome.FATAL, f"the egress guard refuses the upstream: {exc.public_message}"
    return Outcome.FAIL, exc.public_message


async def _probe_mcp_remote(
    rt: Runtime, key: str, connection: dict[str, Any], *, per_user: bool = False
) -> Verdict:
    timeout = rt.settings.health_timeout_s
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        # The session's own deadlines bound each step; this bounds the whole probe.
        async with asyncio.timeout(timeout * 2):
            session = await rt.mcp.session(key, connection, timeout_s=timeout)
            remaining = max(0.1, timeout - (loop.time() - started))
            await session.ping(timeout_s=remaining)
    except UpstreamError as exc:
        if exc.reason in _DROP_SESSION:
            await rt.mcp.discard(key)  # the next probe or call opens a fresh one
        status = exc.data.get("status")
        if per_user and exc.reason == "upstream_unavailable" and status in (401, 403):
            # A per_user toolkit's calls carry each person's own credential, which a probe
            # never borrows: a server that asks for one answered, so it is reachable.
            elapsed = loop.time() - started
            verdict = rt.health.limits.classify(elapsed)
            return (
                verdict,
                f"answered in {elapsed:.2f} s (HTTP {status}: each person connects their own account)",
            )
        if exc.reason != "upstream_error":
            return _failure(exc)
        # A JSON-RPC error (say, a server without ping) is still an answer: it is alive.
    except TimeoutError:
        return Outcome.FAIL, f"no answer within {timeout * 2:g} s"
    elapsed = loop.time() - started
    return rt.health.limits.classify(elapsed), f"answered in {elapsed:.2f} s"


async def _probe_stdio(rt: Runtime, kit_id: int, key: str, connection: dict[str, Any]) -> Verdict:
    process = rt.mcp.processes.get(key)
    state = rt.health.get(kit_id)
    broken = state is not None and state.health is Health.BROKEN
    if (process is None or process.state is State.STOPPED) and not broken:
        return None  # never started, or stopped after idling: nothing is wrong
    if process is not None and process.state is State.STARTING:
        return Outcome.STARTING, "the stdio server is starting"
    if process is not None and process.state is State.RUNNING:
        verdict = await _ping_stdio(rt, key)
        if broken and verdict[0] is Outcome.FAIL:
            # Still hung after it was found broken: stop it, so the next probe starts a
            # fresh child (a broken toolkit refuses calls; nothing else would restart it).
            await rt.mcp.discard(key)
        return verdict
    crash = "the stdio server crashed"
    if process is not None and process.last_error is not None:
        crash = process.last_error.public_message
    try:
        # Restart through the pool (within its crash back-off); the handshake is the probe.
        await rt.mcp.session(key, connection, timeout_s=rt.settings.health_timeout_s)
    except UpstreamError as exc:
        return _failure(exc) if exc.reason == "ssrf_blocked" else (Outcome.FAIL, crash)
    return Outcome.OK, "the stdio server was restarted and answered"


async def _ping_stdio(rt: Runtime, key: str) -> tuple[Outcome, str]:
    """A running child may still be hung: ``ping`` it through its pooled session.

    The ping and its answer do not restart the idle timer (``StdioTransport``), so an idle
    server still stops. No answer within ``health_timeout_s`` is a failure; an error
    answer (a server without ``ping``) is still an answer.
    """
    session = rt.mcp.pooled(key)
    if session is None:
        return Outcome.OK, "the stdio server is running"
    timeout = rt.settings.health_timeout_s
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        await session.ping(timeout_s=timeout)
    except UpstreamError as exc:
        if exc.reason == "upstream_timeout":
            return Outcome.FAIL, f"the stdio server is running but did not answer a ping within {timeout:g} s"
        if exc.reason != "upstream_error":
            return Outcome.FAIL, exc.public_message
    elapsed = loop.time() - started
    return rt.health.limits.classify(elapsed), f"the stdio server answered a ping in {elapsed:.2f} s"


async def _verdict(rt: Runtime, kit: Toolkit) -> Verdict:
    if kit.source_kind == "mcp":
        async with rt.db.read() as conn:
            connection = await store.toolkit_connection(conn, kit.id)
        if not connection:
            return None
        # The same connection calls use (credential included), so the pooled session is shared.
        try:
            prepared = await credentials.prepare_kit(rt, kit.id)
        except UpstreamError as exc:  # an undecryptable credential: broken until set again
            return Outcome.FATAL, exc.public_message
        connection = prepared.connection(connection)
        key = pool_key(kit.project, kit.slug)
        if connection.get("transport") == "stdio":
            return await _probe_stdio(rt, kit.id, key, connection)
        return await _probe_mcp_remote(rt, key, connection, per_user=prepared.mode == "per_user")
    if kit.source_kind == "openapi" and kit.base_url:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await credentials.load_auth(rt, kit.id)  # an undecryptable credential: broken (VAULT-03)
        except UpstreamError as exc:
            return Outcome.FATAL, exc.public_message
        try:
            await tcp_reachable(rt.egress, kit.base_url, timeout_s=rt.settings.health_timeout_s)
        except UpstreamError as exc:
            return _failure(exc)
        elapsed = loop.time() - started
        return rt.health.limits.classify(elapsed), f"connected in {elapsed:.2f} s"
    return None


async def probe_toolkit(rt: Runtime, kit: Toolkit) -> HealthState | None:
    """Probe one toolkit now and record the outcome; its state after (None: not probed)."""
    rt.health.seed(kit.id, kit.health, kit.health_reason)
    verdict = await _verdict(rt, kit)
    if verdict is None:
        return None
    await record(rt, kit.id, f"{kit.project}.{kit.slug}", *verdict)
    return rt.health.get(kit.id)


def _row(kit: Toolkit) -> dict[str, Any]:
    return {
        "slug": kit.slug,
        "project": kit.project,
        "source_kind": kit.source_kind,
        "health": kit.health,
        "reason": kit.health_reason,
        "since": kit.health_changed_at,
    }


async def toolkit_health(rt: Runtime, *, project: str | None = None) -> list[dict[str, Any]]:
    """Every toolkit's stored health (transitions are written as they happen)."""
    async with rt.db.read() as conn:
        kits = await store.list_toolkits(conn, project=project)
    return [_row(k) for k in kits]


async def probe_named(rt: Runtime, slug: str, *, project: str = "default") -> dict[str, Any]:
    """One probe now, for the admin API; the toolkit's health row afterwards."""
    async with rt.db.read() as conn:
        kits = await store.find_toolkits(conn, slug, project=project)
    if not kits:
        raise NotFound(f"no toolkit named {slug!r} in project {project!r}", field="slug")
    state = await probe_toolkit(rt, kits[0])
    async with rt.db.read() as conn:
        kits = await store.find_toolkits(conn, slug, project=project)
    if not kits:
        raise NotFound(f"toolkit {slug!r} was removed while it was probed", field="slug")
    row = _row(kits[0])
    row["probed"] = state is not None
    return row


class HealthMonitor:
    """Probes every toolkit each ``health_interval_s``; ``start()`` after serving begins."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.interval_s = rt.settings.health_interval_s
        self._task: asyncio.Task[None] | None = None
        self._probes: dict[int, asyncio.Task[None]] = {}

    def start(self) -> None:
        if self.interval_s <= 0:
            log.info("health probes are off (TOOLSPOKE_HEALTH_INTERVAL_S=0)")
            return
        if self._task is None:
            self.rt.health.enforcing = True
            self._task = asyncio.get_running_loop().create_task(self._run(), name="toolspoke-health")

    async def aclose(self) -> None:
        self.rt.health.enforcing = False
        tasks = [t for t in (self._task, *self._probes.values()) if t is not None]
        self._task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._probes.clear()

    async def _run(self) -> None:
        while True:
            try:
                await self._round()
            except Exception:  # the loop must outlive one bad round
                log.exception("a health probe round failed")
            await asyncio.sleep(self.interval_s)

    async def _round(self) -> None:
        async with self.rt.db.read() as conn:
            kits = await store.list_toolkits(conn)
        self.rt.health.keep_only({k.id for k in kits})
        loop = asyncio.get_running_loop()
        for kit in kits:
            self.rt.health.seed(kit.id, kit.health, kit.health_reason)
            if kit.id in self._probes:
                continue  # still probing since an earlier round
            task = loop.create_task(self._probe(kit), name=f"toolspoke-health-{kit.slug}")
            self._probes[kit.id] = task
            task.add_done_callback(functools.partial(self._probe_done, kit.id))

    def _probe_done(self, toolkit_id: int, task: asyncio.Task[None]) -> None:
        if self._probes.get(toolkit_id) is task:
            del self._probes[toolkit_id]

    async def _probe(self, kit: Toolkit) -> None:
        try:
            await probe_toolkit(self.rt, kit)
        except Exception:  # one toolkit's probe must not stop the others
            log.exception("health probe of %s.%s failed", kit.project, kit.slug)


__all__ = ["HealthMonitor", "probe_named", "probe_toolkit", "toolkit_health"]
