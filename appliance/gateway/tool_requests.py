"""A ``tools/call`` as a face hands it in: the pipeline's request stage, before the call itself.

    envelope → idempotency claim (replay or refuse a retry) → address → the call pipeline
    → store the result for the key

A retry of a call that waited for approval names it in ``_meta`` (``toolspoke/approval``)
or carries the same idempotency key; both travel down to the pipeline's approval stage.
A call refused for want of an approval frees its key like any refusal, so that the retry
with the same key runs it.

Faces and ``rpc/mcp.py`` hand in the request's params as they came and get a
``CallResult`` back; everything a tool call decides (refusals and their audit rows,
idempotency, rate limits) happens from here on. What the name addresses: on
``/mcp/<slug>`` a tool of that toolkit under its own name (``gateway/direct.py``); on the
bridge a runner's target (``gateway/bridge.py``), a bridge tool, or a tool by its full
name (``gateway/pipeline.py``).
"""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from appliance.errors import ApplianceError, InvalidParams
from appliance.gateway import accounting, audit, bridge, direct, idempotency
from appliance.gateway.calls import resolve_tool
from appliance.gateway.code_runs import Ask
from appliance.gateway.pipeline import call_tool
from appliance.gateway.runtime import Runtime
from appliance.models import CallResult, Principal, Tool, Toolkit
from appliance.protocol.meta import APPROVAL_KEY
from appliance.protocol.relays import LogRelay, ProgressCallback

MAX_APPROVAL_ID = 64


@dataclass(slots=True)
class ToolsCall:
    """One ``tools/call`` request: its params as sent, who sent it, and where."""

    principal: Principal
    params: dict[str, Any]
    toolkit: Toolkit | None = None  # on /mcp/<slug>: that toolkit's tools, no bridge
    on_progress: ProgressCallback | None = None
    on_log: LogRelay | None = None
    ask: Ask | None = None  # a script's call that waits for approval may ask in band


async def serve(rt: Runtime, request: ToolsCall) -> CallResult:
    """The request, stage by stage. A keyed call runs at most once per (caller, key)."""
    name, arguments, key = await envelope(rt, request)
    if key is None or request.principal.anonymous:
        return await address(rt, request, name, arguments)
    target = "bridge" if request.toolkit is None else f"toolkit:{request.toolkit.id}"
    claim = await idempotency.claim(rt, request.principal, key, target=target, name=name, arguments=arguments)
    if claim.held is not None:
        return await replay(rt, request, name, arguments, claim)
    try:
        result = await address(rt, request, name, arguments, key)
    except ApplianceError:
        await idempotency.release(rt, claim)  # refused before anything left: a retry may run it
        raise
    except BaseException:
        idempotency.interrupted(rt, claim)  # the upstream may have acted: never run twice
        raise
    await idempotency.finish(rt, claim, result)
    return result


async def envelope(rt: Runtime, request: ToolsCall) -> tuple[str, dict[str, Any], str | None]:
    """The call's name, arguments and idempotency key; a malformed one is refused by member
    (and audited all the same)."""
    params = request.params
    try:
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidParams("'name' must be a non-empty string", field="name")
        arguments = params.get("arguments", {})
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise InvalidParams("'arguments' must be an object", field="arguments")
        key = idempotency.key_of(params)
        approval_of(params)  # checked here, so that a malformed one is refused by member
        return name, arguments, key
    except InvalidParams as exc:
        await audit.refused(rt, request.principal, params.get("name"), exc)
        raise


def approval_of(params: dict[str, Any]) -> str | None:
    """The approval a retry names in ``_meta`` (None: none); a malformed one is refused by name."""
    meta = params.get("_meta")
    if not isinstance(meta, dict) or APPROVAL_KEY not in meta:
        return None
    value = meta[APPROVAL_KEY]
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_APPROVAL_ID or not value.isprintable():
        raise InvalidParams(
            f"'_meta.{APPROVAL_KEY}' must be an approval id (a string of 1 to {MAX_APPROVAL_ID} characters)",
            field=f"_meta.{APPROVAL_KEY}",
        )
    return value


def address(
    rt: Runtime, request: ToolsCall, name: str, arguments: dict[str, Any], key: str | None = None
) -> Coroutine[Any, Any, CallResult]:
    """What the name means where it was sent (await it); every tool call among them takes the
    pipeline. Hands back the callee's coroutine: one frame less on the call's suspensions."""
    p, progress, log = request.principal, request.on_progress, request.on_log
    ask = {"approval": approval_of(request.params), "key": key}
    if request.toolkit is not None:
        return direct.call(rt, p, request.toolkit, name, arguments, on_progress=progress, on_log=log, **ask)
    if bridge.serves(rt, name):  # the runners and code tools among them call the pipeline
        return bridge.call_bridge(
            rt, p, name, arguments, on_progress=progress, on_log=log, asker=request.ask, **ask
        )
    return call_tool(rt, p, name, arguments, on_progress=progress, on_log=log, aside=True, **ask)


async def replay(
    rt: Runtime, request: ToolsCall, name: str, arguments: dict[str, Any], claim: idempotency.Claim
) -> CallResult:
    """A retry: the first call's stored result, or a conflict. Nothing runs; one audit row."""
    principal = request.principal
    try:
        accounting.limit(rt, principal)  # retries are requests too: they count against the limit
        result = idempotency.stored(claim)
    except ApplianceError as exc:
        await audit.refused(rt, principal, name, exc)
        raise
    tool, runner = await identify(rt, request, name, arguments)
    await audit.replayed(rt, principal, name, result, tool=tool, runner=runner)
    return result


async def identify(
    rt: Runtime, request: ToolsCall, name: str, arguments: dict[str, Any]
) -> tuple[Tool | None, str | None]:
    """The tool (and runner) a replayed call was for, for its audit row."""
    if request.toolkit is not None:
        return await direct.tool_named(rt, request.principal, request.toolkit, name), None
    runner = name if name in bridge.RUNNERS else None
    inner = arguments.get("tool") if runner else name
    if not isinstance(inner, str) or inner in bridge.BRIDGE_NAMES:
        return None, runner
    try:
        return await resolve_tool(rt, request.principal, inner), runner
    except ApplianceError:
        return None, runner  # gone since the first call: the row keeps the name


async def refused(rt: Runtime, principal: Principal, params: dict[str, Any], exc: ApplianceError) -> None:
    """The audit row of a tools/call refused as a whole (its params nest too deep): named by
    the tool it asked for, a runner's target when that is a plain name."""
    name = params.get("name")
    name = name if isinstance(name, str) else None
    arguments = params.get("arguments")
    runner = name if name in bridge.RUNNERS else None
    inner = arguments.get("tool") if runner and isinstance(arguments, dict) else None
    await audit.refused(rt, principal, inner if isinstance(inner, str) else name, exc, runner=runner)


async def unreachable(rt: Runtime, principal: Principal, params: dict[str, Any], exc: ApplianceError) -> None:
    """The audit row of a tools/call sent to a toolkit endpoint the caller cannot reach (no
    grant, or no such toolkit): an attempt is an attempt, whatever answered it."""
    await audit.refused(rt, principal, params.get("name"), exc)
