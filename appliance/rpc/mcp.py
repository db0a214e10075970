"""The MCP method table: initialize, ping, tools/list, tools/call, notifications.

Transport-free: ``web/`` (streamable HTTP) and, later, the stdio face hand in a parsed
``Message`` plus who is calling, and get back a JSON-RPC response object. Every
ApplianceError becomes a JSON-RPC error here; anything unexpected becomes -32603 with a
correlation id, the details going only to the server log.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from appliance import __version__
from appliance.errors import (
    ApplianceError,
    ApprovalRefused,
    ApprovalRequired,
    ArgumentsInvalid,
    ConnectionRequired,
    InvalidParams,
    MethodNotFound,
    MissingClientCapability,
)
from appliance.gateway import accounting, bridge, direct, tool_requests
from appliance.gateway.runtime import Runtime
from appliance.models import CallResult, Principal, Toolkit
from appliance.protocol import versions
from appliance.protocol.log_levels import LOG_LEVELS, log_rank
from appliance.protocol.meta import OURS, PROGRESS_TOKEN_KEY, SERVER_INFO_KEY, progress_token
from appliance.protocol.relays import LogRelay, ProgressCallback
from appliance.rpc import inband, jsonrpc

log = logging.getLogger(__name__)

SERVER_INFO = {"name": "toolspoke", "title": "toolspoke tool gateway", "version": __version__}
# tools/list changes only when an import adds the first guide; a short freshness hint keeps
# modern clients from re-listing on every turn. "private": the list will depend on the
# caller's grants, so shared caches must not serve it across credentials.
TOOLS_LIST_TTL_MS = 60_000
# logging: upstream notifications/message are relayed during a tools/call.
CAPABILITIES: dict[str, Any] = {"tools": {"listChanged": False}, "logging": {}}

INSTRUCTIONS = (
    "toolspoke is a tool gateway. Find tools with search_tools (describe the task), then run one with "
    "the runner its result names: use_tool (read), run_tool (write) or run_destructive_tool. "
    "list_toolkits shows what is installed; describe_tools gives full schemas."
)


# Params of an elicitation/create and the longest wait → the client's result (None: none).
Elicit = Callable[[dict[str, Any], float], Awaitable[dict[str, Any] | None]]


@dataclass
class CallContext:
    principal: Principal
    protocol_version: str
    modern: bool = False
    toolkit: Toolkit | None = None  # set on /mcp/<slug>: that toolkit's tools, no bridge
    # Sends a JSON-RPC notification to the caller ahead of the response (None: cannot).
    notify: Callable[[dict[str, Any]], Awaitable[None]] | None = None
    # The least severe upstream log message relayed (None: none). 2026-07-28: the request's
    # _meta logLevel; legacy: the session's logging/setLevel, everything until one is set.
    log_level: str | None = None
    # Keeps a legacy session's logging/setLevel (None: the face has no session to keep it).
    set_log_level: Callable[[str], None] | None = None
    # 2026-07-28: the request's declared client capabilities (None: legacy era).
    client_capabilities: dict[str, Any] | None = None
    # 2025 era: asks the client's user (form-mode elicitation/create on this request's
    # channel) and waits, bounded, for the result (None: no answer). None: the client
    # declared no elicitation, or the channel cannot carry a request.
    elicit: Elicit | None = None
    # 2025 era: the session's client declared URL-mode elicitation at initialize.
    asks_urls: bool = False


def _identity(kit: Toolkit | None) -> tuple[dict[str, Any], str]:
    if kit is None:
        return SERVER_INFO, INSTRUCTIONS
    info = {"name": f"toolspoke/{kit.slug}", "title": kit.title or kit.slug, "version": __version__}
    return info, (kit.guide or kit.description or f"The {kit.slug} toolkit, served by toolspoke.")[:4000]


def initialize_result(params: dict[str, Any], kit: Toolkit | None = None) -> dict[str, Any]:
    requested = params.get("protocolVersion")
    if not isinstance(requested, str):
        raise InvalidParams("'protocolVersion' must be a string", field="protocolVersion")
    # A server that does not support the requested version answers with one it does.
    version = versions.negotiate(requested)
    info, instructions = _identity(kit)
    return {
        "protocolVersion": version,
        "capabilities": CAPABILITIES,
        "serverInfo": info,
        "instructions": instructions,
    }


def discover_result(kit: Toolkit | None = None) -> dict[str, Any]:
    """``server/discover`` (2026-07-28): versions, capabilities and identity, up front."""
    _, instructions = _identity(kit)
    return {
        "supportedVersions": list(versions.ALL_VERSIONS),
        "capabilities": CAPABILITIES,
        "instructions": instructions,
        "ttlMs": 3_600_000,
        "cacheScope": "public",
    }


def tool_result(result: CallResult) -> dict[str, Any]:
    out: dict[str, Any] = {"content": result.content, "isError": result.is_error}
    if result.structured is not None:
        out["structuredContent"] = result.structured
    if result.meta:
        out["_meta"] = {OURS + k: v for k, v in result.meta.items()}
    return out


def _progress_relay(ctx: CallContext, params: dict[str, Any]) -> ProgressCallback | None:
    """An upstream progress callback that re-sends it under the CLIENT's token."""
    token = progress_token(params)
    notify = ctx.notify
    if token is None or notify is None:
        return None

    async def relay(upstream: dict[str, Any]) -> None:
        progress = upstream.get("progress")
        if not isinstance(progress, int | float) or isinstance(progress, bool):
            return
        out: dict[str, Any] = {PROGRESS_TOKEN_KEY: token, "progress": progress}
        total = upstream.get("total")
        if isinstance(total, int | float) and not isinstance(total, bool):
            out["total"] = total
        message = upstream.get("message")
        if isinstance(message, str):
            out["message"] = message
        await notify({"jsonrpc": "2.0", "method": "notifications/progress", "params": out})

    return relay


def _log_relay(ctx: CallContext) -> LogRelay | None:
    """Upstream log messages for this call, re-sent to the caller at or above its level."""
    notify, level = ctx.notify, ctx.log_level
    if notify is None or level is None:
        return None

    async def deliver(upstream: dict[str, Any]) -> None:
        out: dict[str, Any] = {"level": upstream["level"], "data": upstream.get("data")}
        if isinstance(upstream.get("logger"), str):
            out["logger"] = upstream["logger"]
        await notify({"jsonrpc": "2.0", "method": "notifications/message", "params": out})

    return LogRelay(level, deliver)


def _set_level(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    level = params.get("level")
    if log_rank(level) < 0:
        raise InvalidParams(f"'level' must be one of {', '.join(LOG_LEVELS)}", field="level")
    if ctx.set_log_level is not None:
        ctx.set_log_level(str(level))
    return {}


async def refused_unreachable(rt: Runtime, principal: Principal, body: bytes, exc: ApplianceError) -> None:
    """A ``tools/call`` sent to a toolkit endpoint the caller cannot reach (no grant, or no
    such toolkit) is refused before any message is served, and audited all the same: an
    attempt is an attempt, whatever answered it. Other messages and bodies that do not
    parse leave nothing (they are not tool calls)."""
    try:
        msg = jsonrpc.parse(body)
    except ApplianceError:
        return
    if msg.kind == "request" and msg.method == "tools/call" and isinstance(msg.params, dict):
        await tool_requests.unreachable(rt, principal, msg.params, exc)


async def _tools_call(rt: Runtime, ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    request = tool_requests.ToolsCall(
        ctx.principal,
        params,
        ctx.toolkit,
        on_progress=_progress_relay(ctx, params),
        on_log=_log_relay(ctx),
        ask=inband.asker(rt, ctx),  # a script's call that waits for a person pauses and asks
    )
    try:
        if inband.retrying(ctx, params):  # 2026-07-28: the answer to an input_required result
            result = await inband.resume(rt, ctx, request)
        else:
            result = await tool_requests.serve(rt, request)
    except ApprovalRequired as exc:
        # The call waits for a person: asked in band where the client can ask its user, else
        # a result with the approval's id, queue URL and how to retry (rpc/inband.py).
        answer = await inband.needed(rt, ctx, request, exc)
        return answer if isinstance(answer, dict) else tool_result(answer)
    except ApprovalRefused as exc:  # names an approval that does not cover it
        return tool_result(inband.out_of_band(exc))
    except ConnectionRequired as exc:
        # Nothing sent: the person must connect. Sent to the connect page in band where the
        # client takes URL-mode elicitation (-32042, or input_required), else -32008.
        return inband.connection_needed(ctx, request, exc)
    except ArgumentsInvalid as exc:
        # 2025-11-25 moved input-validation failures into tool results so the model can
        # correct itself; earlier revisions expect a protocol error with the path.
        if versions.validation_is_protocol_error(ctx.protocol_version):
            raise
        return tool_result(
            CallResult(
                content=[{"type": "text", "text": exc.public_message}], is_error=True, meta=exc.payload()
            )
        )
    return tool_result(_refuse_undeclared(ctx, result))


def _refuse_undeclared(ctx: CallContext, result: CallResult) -> CallResult:
    """An upstream that needs a client capability (-32021) the *caller* did not declare either:
    that is the caller's error to see (2026-07-28), not a failed tool. When the caller did
    declare it, the gateway is what falls short (it relays no server-to-client requests): an
    isError result that says so. Legacy eras have no such error code: the result stands."""
    required = result.meta.get("requiredCapabilities")
    declared = ctx.client_capabilities
    if declared is None or not isinstance(required, dict):
        return result
    if result.meta.get("code") != MissingClientCapability.rpc_code:
        return result
    missing = {k: v for k, v in required.items() if k not in declared}
    wanted, have = required.get("extensions"), declared.get("extensions")
    if isinstance(wanted, dict):
        absent = {k: v for k, v in wanted.items() if not isinstance(have, dict) or k not in have}
        if absent:
            missing["extensions"] = absent
        else:
            missing.pop("extensions", None)
    if missing:
        names = ", ".join(sorted(missing))
        raise MissingClientCapability(
            f"this tool needs the client capability {names}, which the request did not declare",
            data={"requiredCapabilities": missing},
        )
    names = ", ".join(sorted(required))
    text = f"the upstream needs the client capability {names}, which the gateway does not relay"
    return CallResult(
        content=[{"type": "text", "text": text}],
        is_error=True,
        meta={"reason": "capability_not_relayed", "requiredCapabilities": required},
    )


# Cheap but floodable: counted under the browse limit with search (RELIABILITY RATE-05).
# Callers without a key (a published toolkit's endpoint) share no identity to count by.
BROWSE_METHODS = frozenset({"tools/list", "initialize", "ping", "server/discover", "logging/setLevel"})


async def dispatch(rt: Runtime, ctx: CallContext, msg: jsonrpc.Message) -> dict[str, Any]:
    """The result object for one request (raises ApplianceError for protocol errors)."""
    method, params = msg.method, msg.params
    if msg.refusal is not None:
        if method == "tools/call":
            await tool_requests.refused(rt, ctx.principal, params, msg.refusal)
        raise msg.refusal
    if method in BROWSE_METHODS:
        accounting.admit_browse(rt, ctx.principal)
    if method == "tools/list":
        cursor = params.get("cursor")
        if cursor is not None:
            raise InvalidParams("unknown cursor: tools/list has a single page", field="cursor")
        if ctx.toolkit is not None:
            tools = await direct.list_tools(rt, ctx.principal, ctx.toolkit)
        else:
            tools = await bridge.list_tools(rt, ctx.principal)
        listed: dict[str, Any] = {"tools": tools}
        if ctx.modern:
            listed.update(ttlMs=TOOLS_LIST_TTL_MS, cacheScope="private")
        return listed
    if method == "tools/call":
        return await _tools_call(rt, ctx, params)
    if ctx.modern:
        # 2026-07-28 removed ping and the handshake; discover replaces both.
        if method == "server/discover":
            return discover_result(ctx.toolkit)
    elif method == "ping":
        return {}
    elif method == "initialize":
        return initialize_result(params, ctx.toolkit)
    elif method == "logging/setLevel":  # 2026-07-28 replaced it with the per-request level
        return _set_level(ctx, params)
    raise MethodNotFound(f"method not found: {method}", field="method", data={"method": method})


def _stamp(result: dict[str, Any], kit: Toolkit | None) -> dict[str, Any]:
    """Every 2026-07-28 result says whether it is complete and who answered."""
    meta = dict(result.get("_meta") or {})
    meta[SERVER_INFO_KEY] = _identity(kit)[0]
    return {"resultType": "complete", **result, "_meta": meta}  # or input_required, as it said


async def respond(rt: Runtime, ctx: CallContext, msg: jsonrpc.Message) -> dict[str, Any]:
    """A full JSON-RPC response for a request; never raises."""
    try:
        result = await dispatch(rt, ctx, msg)
        return jsonrpc.result(msg.id, _stamp(result, ctx.toolkit) if ctx.modern else result)
    except ApplianceError as exc:
        if type(exc) is ApplianceError:
            return internal_error(msg.id, exc)
        return jsonrpc.error(msg.id, exc)
    except Exception as exc:  # noqa: BLE001 - the one boundary where bugs become -32603
        return internal_error(msg.id, exc)


def internal_error(msg_id: Any, exc: BaseException) -> dict[str, Any]:
    correlation = secrets.token_hex(8)
    log.error("internal error %s", correlation, exc_info=exc)
    err = ApplianceError(f"internal error; reference {correlation} in the server log")
    return jsonrpc.error(msg_id, err, correlation)
