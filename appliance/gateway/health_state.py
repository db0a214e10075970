"""Recording upstream health: outcomes into the book, transitions into the database and log.

Both probes (``gateway/health.py``) and real calls (``gateway/calls.py``, via ``watched``)
report here. It is a module of its own so that ``calls`` can use it without importing the
probe loop, which itself needs ``calls.pool_key``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from appliance.catalogue import store
from appliance.errors import StorageError, UpstreamError
from appliance.gateway import redaction
from appliance.gateway.health_machine import Health, Outcome, Transition
from appliance.gateway.runtime import Runtime
from appliance.models import Tool

log = logging.getLogger(__name__)


async def record(
    rt: Runtime, toolkit_id: int, label: str, outcome: Outcome, detail: str = ""
) -> Transition | None:
    """Fold one outcome in; persist and log the transition it caused, if any."""
    # The detail quotes the upstream (an error, a crashed child's stderr): it is stored,
    # logged and shown in refusals, so every vault secret is redacted from it first.
    detail = await redaction.text(rt, detail) if detail else detail
    transition = rt.health.observe(toolkit_id, outcome, detail)
    if transition is None:
        return None
    level = logging.INFO if transition.after is Health.ACTIVE else logging.WARNING
    log.log(level, "health %s: %s -> %s (%s)", label, transition.before, transition.after, transition.reason)
    try:
        async with rt.db.write() as tx:
            await store.set_toolkit_health(tx, toolkit_id, transition.after.value, transition.reason)
    except StorageError as exc:
        # The in-memory state still rules this process; the next transition persists again.
        log.error("health %s: could not store the transition: %s", label, exc.public_message)
    return transition


def broken_refusal(tool: Tool, reason: str) -> UpstreamError:
    return UpstreamError(
        f"toolkit {tool.toolkit!r} (project {tool.project!r}) is broken: {reason or 'its upstream fails'}."
        f" {tool.name} was not run; health probes keep checking and will bring it back once the "
        "upstream answers again",
        reason="upstream_broken",
        data={"toolkit": tool.toolkit, "health": Health.BROKEN.value},
    )


@contextlib.asynccontextmanager
async def watched(rt: Runtime, tool: Tool) -> AsyncIterator[None]:
    """Around one upstream call: refuse at once when broken; feed the outcome to the state.

    Only while probes run (``rt.health.enforcing``): a refused call proves nothing, so a
    broken toolkit may only refuse calls when something else will notice its recovery.
    ``upstream_unavailable`` is a failure; any answer, an upstream JSON-RPC error included,
    shows the server alive. Timeouts say more about the tool than the server: not counted.
    """
    book = rt.health
    if not book.enforcing:
        yield
        return
    state = book.get(tool.toolkit_id)
    if state is not None and state.health is Health.BROKEN:
        raise broken_refusal(tool, state.reason)
    label = f"{tool.project}.{tool.toolkit}"
    try:
        yield
    except UpstreamError as exc:
        if exc.reason == "upstream_unavailable":
            await record(rt, tool.toolkit_id, label, Outcome.FAIL, f"a call failed: {exc.public_message}")
        elif exc.reason == "upstream_error":
            await record(rt, tool.toolkit_id, label, Outcome.OK)
        raise
    await record(rt, tool.toolkit_id, label, Outcome.OK)
