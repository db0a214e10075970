"""The tool a call means and the upstream it goes to: resolve, runner check, dispatch.

Stages of the call pipeline (``gateway/pipeline.py``), which every caller takes (bridge
runners, direct ``tools/call``, ``/mcp/<slug>``, the CLI).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from appliance.access import visibility
from appliance.catalogue import naming, store
from appliance.db import SyncReader
from appliance.egress.openapi_call import call_operation
from appliance.errors import InvalidParams, ToolNotFound, Unauthorized, UpstreamError, WrongRunner
from appliance.gateway import credentials, lore_tools
from appliance.gateway.health_state import watched
from appliance.gateway.runtime import Runtime
from appliance.models import RUNNER_FOR_KIND, CallResult, Principal, Tool
from appliance.protocol import param_headers
from appliance.protocol.relays import LogRelay, ProgressCallback

# The code tools (gateway/code_runs.py) as the runner of the calls their scripts make.
CODE_RUNNERS = frozenset({"use_code", "run_code"})
_MCP_CONTENT_TYPES = {"text", "image", "audio", "resource", "resource_link"}


def unknown_tool(name: str, suggestions: Sequence[str] = ()) -> ToolNotFound:
    # One text for "absent" and "not yours", so an error never reveals a tool exists; the
    # suggestions come from the names the caller may see alone, so they reveal nothing either.
    if not suggestions:
        return ToolNotFound(f"unknown tool {name!r}; find tools with search_tools", field="name")
    return ToolNotFound(
        f"unknown tool {name!r}; did you mean {' or '.join(repr(s) for s in suggestions)}?"
        " (or find tools with search_tools)",
        field="name",
        data={"suggestions": list(suggestions)},
    )


async def suggest_tools(
    rt: Runtime, principal: Principal, name: str, *, project: str | None = None
) -> list[str]:
    """Visible tool names close to ``name`` (did-you-mean), found in the reader's thread."""
    if len(name) > naming.SUGGEST_INPUT_MAX:
        return []

    def find(r: SyncReader) -> list[str]:
        scope = visibility.scope_in(r, principal)
        candidates = store.suggestion_candidates_in(r, name, project=project, scope=scope)
        return naming.close_names(name, candidates)

    async with rt.db.read() as conn:
        return await conn.batch(find)


async def resolve_tool(rt: Runtime, principal: Principal, name: str, *, project: str | None = None) -> Tool:
    """The one tool ``name`` means to this caller: the access check of every call path.

    A tool the caller may not see is filtered inside the lookup, so it fails exactly like a
    name that never existed; the ambiguity error lists only projects the caller sees.
    """
    if principal.anonymous:
        raise Unauthorized("calling a tool needs an API key: send 'Authorization: Bearer <key>'")
    if not isinstance(name, str) or not name or len(name) > 256:
        raise unknown_tool(str(name)[:80])
    # Remembered until the database changes (per caller, since the scope is the caller's):
    # a steady stream of calls skips the reader hop.
    tools: list[Tool] = await rt.db.cached(
        ("tools_named", name, project, principal),
        lambda conn: conn.batch(
            lambda r: store.tools_named_in(
                r, [name], project=project, scope=visibility.scope_in(r, principal)
            )
        ),
    )
    if not tools:
        raise unknown_tool(name, await suggest_tools(rt, principal, name, project=project))
    if len(tools) > 1:
        projects = [t.project for t in tools]
        raise InvalidParams(
            f"tool {name!r} is installed in several projects ({', '.join(projects)}); "
            "name one with the 'project' argument",
            field="project",
            data={"projects": projects},
        )
    return tools[0]


def check_runner(tool: Tool, runner: str) -> None:
    if runner in CODE_RUNNERS:  # a script's call: use_code reads only, run_code may do anything
        if runner == "use_code" and tool.kind != "read":
            raise WrongRunner(
                f"{tool.name} is a {tool.kind} tool: use_code calls read tools only; run the script "
                "with run_code; nothing was run",
                field="tool",
                data={"runner": "run_code", "kind": tool.kind},
            )
        return
    right = RUNNER_FOR_KIND[tool.kind]
    if runner != right:
        raise WrongRunner(
            f"{tool.name} is a {tool.kind} tool: call it with {right}, not {runner}; nothing was run",
            field="tool",
            data={"runner": right, "kind": tool.kind},
        )


async def dispatch(
    rt: Runtime,
    tool: Tool,
    arguments: dict[str, Any],
    on_progress: ProgressCallback | None = None,
    on_log: LogRelay | None = None,
    *,
    prepared: credentials.PreparedCall,
) -> CallResult:
    """The call to the tool's upstream (MCP, HTTP, or a Lore toolkit's documents) with this
    call's credential and byte cap."""
    if tool.source_kind == "mcp":
        return await _call_mcp(rt, tool, arguments, on_progress, on_log, prepared=prepared)
    if tool.source_kind == "lore":  # answered in process from the toolkit's own documents
        return await lore_tools.answer(rt, tool, arguments, max_bytes=prepared.max_bytes)
    if tool.source_kind == "catalog" or tool.binding is None:
        raise UpstreamError(
            f"{tool.name} has no upstream: its toolkit {tool.toolkit!r} was imported from a catalogue "
            "file for search and description only, so it cannot be run",
            reason="no_upstream",
        )
    base_url = tool.binding.get("base_url") or tool.base_url
    if not base_url:
        raise UpstreamError(
            f"toolkit {tool.toolkit!r} has no base URL configured", reason="upstream_unavailable"
        )
    return await call_operation(
        rt.egress,
        base_url=base_url,
        binding=tool.binding,
        arguments=arguments,
        timeout_s=rt.settings.upstream_timeout_s,
        max_bytes=prepared.max_bytes,
        authorizer=prepared.authorizer,
    )


def pool_key(tool_or_project: Tool | str, slug: str | None = None) -> str:
    """The pool's (and the stdio work directory's) name for a toolkit: ``<project>.<slug>``."""
    if isinstance(tool_or_project, Tool):
        return f"{tool_or_project.project}.{tool_or_project.toolkit}"
    return f"{tool_or_project}.{slug}"


async def _call_mcp(
    rt: Runtime,
    tool: Tool,
    arguments: dict[str, Any],
    on_progress: ProgressCallback | None = None,
    on_log: LogRelay | None = None,
    *,
    prepared: credentials.PreparedCall,
) -> CallResult:
    connection = await rt.db.cached(
        ("toolkit_connection", tool.toolkit_id), lambda conn: store.toolkit_connection(conn, tool.toolkit_id)
    )
    if not connection:
        raise UpstreamError(
            f"toolkit {tool.toolkit!r} has no MCP connection configured", reason="no_upstream"
        )
    connection = prepared.connection(connection)  # credential and cap for this call, never stored
    async with watched(rt, tool):  # health: refuse at once when broken; feed the outcome
        raw = await rt.mcp.call_tool(
            prepared.pool_key or pool_key(tool),  # per_user: the user's own session
            connection,
            tool.upstream_name,
            arguments,
            timeout_s=rt.settings.upstream_timeout_s,
            on_progress=on_progress,
            on_log=on_log,
            headers=param_headers.headers_for(tool.input_schema, arguments),  # SEP-2243
        )
    return mcp_result(raw)


def mcp_result(raw: dict[str, Any]) -> CallResult:
    """An upstream CallToolResult as ours; content parts we cannot relay are described instead."""
    content = raw.get("content")
    parts: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("type") in _MCP_CONTENT_TYPES:
            parts.append(part)
        else:
            parts.append(
                {"type": "text", "text": "[an upstream content part of an unknown type was dropped]"}
            )
    structured = raw.get("structuredContent")
    return CallResult(content=parts, structured=structured, is_error=bool(raw.get("isError")))
