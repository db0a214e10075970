"""The tool call as one pipeline: every caller's call takes these stages, in this order.

    rate → resolve → policy (and the data-flow guard) → runner check → validate → connection
    → approval → reserve → credential → dispatch (and the data-flow marks) → redact → keep aside
    → record

``run`` lists them. Each stage is a function of the runtime and the call's ``Attempt``
(``gateway/attempt.py``), which carries everything one stage learns for the next; the
rules live in the modules that own them: the rate limit, the reservation and the fee's fate
in ``accounting``, the tool and its upstream in ``calls``, the read-only guard, the deny
rules and the data-flow guard in ``policy`` (``access/policy.py``, ``access/dataflow.py``;
each agent's recent-call marks in ``dataflow``), input checks in ``validation``, a person's yes
for a call under an ``approve`` rule in ``approvals``,
the credential and the redactor in ``credentials``, large results in ``artifacts``, the
audit row and the charge in ``audit``. A refusal at any stage is recorded and raised; an
upstream failure is an ``isError`` result, never a protocol error; either way the attempt
leaves exactly one audit row, acknowledged only once durable.

Every caller comes through ``call_tool`` or ``run``: the bridge runners
(``gateway/bridge.py``), ``/mcp/<slug>`` (``gateway/direct.py``), a ``tools/call`` by name
(``gateway/tool_requests.py``, which also holds idempotency) and ``toolspoke call``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Coroutine
from typing import Any

from appliance.errors import ApplianceError, RateLimited, UpstreamError
from appliance.gateway import (
    accounting,
    approvals,
    artifacts,
    audit,
    calls,
    connections,
    policy,
    redaction,
)
from appliance.gateway.attempt import Attempt
from appliance.gateway.runtime import Runtime
from appliance.gateway.validation import validate_arguments
from appliance.models import CallResult, Principal, Tool
from appliance.protocol.relays import LogRelay, ProgressCallback


def call_tool(
    rt: Runtime,
    principal: Principal,
    name: str,
    arguments: dict[str, Any],
    *,
    project: str | None = None,
    runner: str | None = None,
    on_progress: ProgressCallback | None = None,
    on_log: LogRelay | None = None,
    aside: bool = False,
    approval: str | None = None,
    key: str | None = None,
) -> Coroutine[Any, Any, CallResult]:
    """One tool call by its full name (await it). ``on_progress`` and ``on_log`` receive an
    MCP upstream's progress and log messages (redacted). ``aside``: the caller can reach
    ``read_result``, so a large result may be kept aside (``gateway/artifacts.py``).
    ``approval``: the approval a retry names; ``key``: the request's idempotency key (a retry
    with the key an approval was asked with may use it). Not itself a coroutine: ``run``'s,
    handed back, spares every suspension of every call one frame to unwind and resume."""
    return run(
        rt,
        Attempt(principal, name, arguments, project, runner, on_progress, on_log, aside, approval, key),
    )


async def run(rt: Runtime, attempt: Attempt) -> CallResult:
    """The stages, in order."""
    rt.calls_in_flight += 1  # a lone call's row may commit without the writer thread's hop
    try:
        try:
            accounting.limit(rt, attempt.principal)  # rate: before even the name is looked up
            tool = await resolve(rt, attempt)
            need = await policy.check(
                rt, attempt.principal, tool, attempt
            )  # may it run: nothing charged or sent
            check_runner(attempt, tool)
            validate_arguments(tool.input_schema, attempt.arguments)
            await connections.require(rt, attempt.principal, tool)  # per_user: nothing leaves without one
            if need is not None:  # an ``approve`` rule: only with a person's yes for this very call
                await approvals.gate(rt, attempt, tool, need)
            await accounting.reserve(rt, attempt, tool)  # storage → quota → credit → hold
            try:
                await credential(rt, attempt, tool)
                await dispatch(rt, attempt, tool)
                if attempt.labels:  # what the answer brought in marks the caller (data-flow guard)
                    rt.taints.mark(attempt.principal, attempt.labels, tool.name)
            except UpstreamError as exc:
                accounting.upstream_failed(rt, attempt, exc)  # an isError result
                if not attempt.sent:
                    await approvals.restore(rt, attempt)  # it never left: the approval stands
            redact(attempt)
            if artifacts.due(rt, attempt):  # after redaction: nothing secret is stored
                await artifacts.keep_aside(rt, attempt)
        except ApplianceError as exc:
            await refused(rt, attempt, exc)
            raise
        except BaseException:
            audit.interrupted(rt, attempt)  # cancelled (the client left) or a bug
            raise
        await audit.record(rt, attempt)  # the audit row and the charge, durable
    finally:
        rt.calls_in_flight -= 1
    assert attempt.result is not None
    return attempt.result


async def resolve(rt: Runtime, attempt: Attempt) -> Tool:
    """Stage: the one tool the name means to this caller (the access check of every call)."""
    attempt.tool = await calls.resolve_tool(rt, attempt.principal, attempt.name, project=attempt.project)
    rt.usage.called(attempt.principal, attempt.tool)  # in memory: settles a search that showed it
    return attempt.tool


def check_runner(attempt: Attempt, tool: Tool) -> None:
    """Stage: a tool sent to the wrong runner is refused before anything runs."""
    if attempt.runner is not None:
        calls.check_runner(tool, attempt.runner)


async def credential(rt: Runtime, attempt: Attempt, tool: Tool) -> None:
    """Stage: the vault's credential for this call (per_user: the caller's user's own), its
    byte cap and its redactor."""
    attempt.prepared = await connections.prepare(rt, tool, attempt.principal)


async def dispatch(rt: Runtime, attempt: Attempt, tool: Tool) -> None:
    """Stage: the upstream call. From here the upstream may act, so the fee is charged unless
    the failure proves that nothing reached it."""
    prepared = attempt.prepared
    assert prepared is not None
    # What the upstream says while it works (progress, log messages) is redacted too.
    on_progress, on_log = prepared.relays(attempt.on_progress, attempt.on_log)
    attempt.sent = True
    started = time.perf_counter()
    try:
        result = await calls.dispatch(rt, tool, attempt.arguments, on_progress, on_log, prepared=prepared)
    except UpstreamError:
        attempt.upstream_s = time.perf_counter() - started
        raise
    except ApplianceError:
        attempt.sent = False  # refused on our side (storage, a bad binding): nothing left
        raise
    except BaseException:
        attempt.upstream_s = time.perf_counter() - started
        raise
    attempt.upstream_s = time.perf_counter() - started
    accounting.answered(attempt, result)


def redact(attempt: Attempt) -> None:
    """Stage: an upstream echoing any stored secret never shows it; the audit row counts it."""
    if attempt.prepared is not None and attempt.result is not None:
        attempt.result, hits = attempt.prepared.redact(attempt.result)
        attempt.redacted += hits


async def refused(rt: Runtime, attempt: Attempt, exc: ApplianceError) -> None:
    """A stage refused the call: the error is redacted, the refusal recorded (no charge); an
    approval it used is given back when nothing was sent."""
    if attempt.prepared is not None:  # raised after the upstream spoke: its text may be in it
        red = attempt.prepared.redactor()
        redaction.scrub(exc, red)
        attempt.redacted += red.hits
    if attempt.consumed is not None:
        with contextlib.suppress(ApplianceError):  # the refusal is the answer either way
            await approvals.restore(rt, attempt)
    if isinstance(exc, RateLimited) and attempt.tool is None:
        # The limit comes before the lookup, and a row without its toolkit would be missing
        # from the owner's history filtered by toolkit. A name the caller cannot see stays a name.
        with contextlib.suppress(ApplianceError):
            await resolve(rt, attempt)
    await audit.refusal(rt, attempt, exc)
