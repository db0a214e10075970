"""The bridge tools an agent sees instead of thousands: search, list, describe, guide, run.

Three runners instead of one so that a client's approval prompt knows what a call can do:
``use_tool`` only reads (readOnlyHint), ``run_tool`` writes, ``run_destructive_tool`` may
delete (destructiveHint). A tool sent to the wrong runner is refused before anything runs.
"""

from __future__ import annotations

from typing import Any

from appliance.access import visibility
from appliance.catalogue import store, toolkit_reads
from appliance.db import SyncReader
from appliance.errors import ApplianceError, InvalidParams, NotFound, UpstreamError
from appliance.gateway import accounting, audit, telemetry
from appliance.gateway.agent_search import search_for_agent
from appliance.gateway.calls import unknown_tool
from appliance.gateway.direct import tool_entry
from appliance.gateway.pipeline import call_tool
from appliance.gateway.runtime import Runtime
from appliance.gateway.validation import validate_arguments
from appliance.models import RUNNER_FOR_KIND, CallResult, Principal, Tool, Toolkit
from appliance.protocol.relays import LogRelay, ProgressCallback
from appliance.search.text import MAX_QUERY_CHARS

_PROJECT = {"type": "string", "description": "Project slug; needed only when a name exists in several."}
_RUN_SCHEMA = {
    "type": "object",
    "properties": {
        "tool": {"type": "string", "description": "Exact tool name from search_tools."},
        "input": {"type": "object", "description": "Arguments matching the tool's input schema."},
        "project": _PROJECT,
    },
    "required": ["tool"],
    "additionalProperties": False,
}


def _runner(name: str, what: str, annotations: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"Run a {what} tool found with search_tools (its `runner` field names this runner).",
        "inputSchema": _RUN_SCHEMA,
        "annotations": annotations,
    }


BRIDGE_TOOLS: list[dict[str, Any]] = [
    {
        "name": "search_tools",
        "description": (
            "Find tools for a task among all installed toolkits. Describe the outcome or name the "
            "service; give `queries` to look for several steps at once. Each result has the exact "
            "tool name, its runner, version, toolkit health and its full input schema."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": f"What you want to do, or a tool name (≤ {MAX_QUERY_CHARS:,} characters).",
                },
                "queries": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 5,
                    "description": "Instead of query: 1 to 5 use cases, results grouped by use case.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "use_case": {
                                "type": "string",
                                "minLength": 1,
                                "description": f"One step of the task (≤ {MAX_QUERY_CHARS:,} characters).",
                            },
                            "known_fields": {
                                "type": "string",
                                "description": "Values you already have, 'key:value' comma-separated; "
                                "tools taking those fields rank higher.",
                            },
                        },
                        "required": ["use_case"],
                        "additionalProperties": False,
                    },
                },
                "toolkit": {"type": "string", "description": "Only this toolkit."},
                "providers": {
                    "type": "array",
                    "items": {"type": "string"},
                    "maxItems": 50,
                    "description": "Only these toolkits.",
                },
                "tags": {
                    "type": "array",
                    "items": {"type": "string"},
                    "maxItems": 50,
                    "description": "Only tools in these groups (OpenAPI tags, servers).",
                },
                "project": _PROJECT,
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 50,
                    "description": "Results per query. Default 8.",
                },
            },
            "additionalProperties": False,
        },
        "annotations": {"title": "Search tools", "readOnlyHint": True, "openWorldHint": False},
    },
    {
        "name": "list_toolkits",
        "description": "List installed toolkits with their project and tool names (no schemas).",
        "inputSchema": {
            "type": "object",
            "properties": {"project": {"type": "string", "description": "Only this project."}},
            "additionalProperties": False,
        },
        "annotations": {"title": "List toolkits", "readOnlyHint": True, "openWorldHint": False},
    },
    {
        "name": "describe_tools",
        "description": "Full descriptions and input schemas for one or more exact tool names.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "names": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 50},
                "project": _PROJECT,
            },
            "required": ["names"],
            "additionalProperties": False,
        },
        "annotations": {"title": "Describe tools", "readOnlyHint": True, "openWorldHint": False},
    },
    {
        "name": "read_guide",
        "description": "Usage notes of a toolkit: concepts, conventions, how its tools fit together.",
        "inputSchema": {
            "type": "object",
            "properties": {"toolkit": {"type": "string"}, "project": _PROJECT},
            "required": ["toolkit"],
            "additionalProperties": False,
        },
        "annotations": {"title": "Read toolkit guide", "readOnlyHint": True, "openWorldHint": False},
    },
    _runner(
        "use_tool",
        "read-only",
        {"title": "Use a read-only tool", "readOnlyHint": True, "openWorldHint": True},
    ),
    _runner(
        "run_tool",
        "write (non-destructive)",
        {"title": "Run a write tool", "readOnlyHint": False, "destructiveHint": False, "openWorldHint": True},
    ),
    _runner(
        "run_destructive_tool",
        "destructive",
        {
            "title": "Run a destructive tool",
            "readOnlyHint": False,
            "destructiveHint": True,
            "openWorldHint": True,
        },
    ),
]
BRIDGE_NAMES = {t["name"] for t in BRIDGE_TOOLS}
RUNNERS = set(RUNNER_FOR_KIND.values())


def describe(tool: Tool) -> dict[str, Any]:
    return {
        "name": tool.name,
        "toolkit": tool.toolkit,
        "project": tool.project,
        "kind": tool.kind,
        "runner": tool.runner,
        "health": tool.health,
        "description": tool.description or tool.title,
        "input_schema": tool.input_schema,
    }


async def list_tools(rt: Runtime, principal: Principal) -> list[dict[str, Any]]:
    """The bridge as ``tools/list`` shows it, then the caller's preloaded tools.

    ``read_guide`` appears only when a toolkit the caller sees has a guide. Preloaded tools
    are listed under their full names, limited to what the caller may call (a name outside
    its scope is silently left out: preloading never widens access).
    """

    def gather(r: SyncReader) -> tuple[bool, list[Tool]]:
        scope = visibility.scope_in(r, principal)
        has_guide = toolkit_reads.any_guide_in(r, scope)
        preloaded = store.tools_named_in(r, principal.preload, scope=scope) if principal.preload else []
        return has_guide, preloaded

    async with rt.db.read() as conn:
        has_guide, preloaded = await conn.batch(gather)
    listed = [t for t in BRIDGE_TOOLS if t["name"] != "read_guide" or has_guide]
    seen = set(BRIDGE_NAMES)
    for tool in preloaded:
        if tool.name not in seen:  # a name in two projects is listed once; calls name the project
            seen.add(tool.name)
            listed.append(tool_entry(tool, tool.name))
    return listed


def _json_result(value: dict[str, Any]) -> CallResult:
    from appliance.db import dumps

    return CallResult(content=[{"type": "text", "text": dumps(value)}], structured=value)


def _error_result(exc: ApplianceError) -> CallResult:
    return CallResult(
        content=[{"type": "text", "text": exc.public_message}], is_error=True, meta=exc.payload()
    )


async def call_bridge(
    rt: Runtime,
    principal: Principal,
    name: str,
    args: dict[str, Any],
    *,
    on_progress: ProgressCallback | None = None,
    on_log: LogRelay | None = None,
) -> CallResult:
    """Run one bridge tool. Its own bad arguments raise ArgumentsInvalid (the rpc layer shapes it
    by protocol version); a failing *target* of a runner is an ``isError`` result."""
    spec = next(t for t in BRIDGE_TOOLS if t["name"] == name)
    if name not in RUNNERS:
        accounting.limit(rt, principal, browse=True)  # free and unaudited, but not unlimited
        validate_arguments(spec["inputSchema"], args)
    else:
        try:
            validate_arguments(spec["inputSchema"], args)
        except InvalidParams as exc:  # a runner call is a tool call: audited even so
            await audit.refused(rt, principal, args.get("tool", name), exc, runner=name)
            raise
    if name == "search_tools":
        # Suggestions of toolkits to install go only to callers who may install (a person's
        # own key or the operator: agents and anonymous callers cannot import).
        may_install = not principal.anonymous and principal.agent_id is None
        with telemetry.timed_search():
            found = await search_for_agent(rt, args, describe, principal=principal, can_install=may_install)
        return _json_result(found)
    if name == "list_toolkits":
        return _json_result({"toolkits": await list_toolkits(rt, principal, project=args.get("project"))})
    if name == "describe_tools":
        return _json_result(await describe_tools(rt, principal, args["names"], project=args.get("project")))
    if name == "read_guide":
        try:
            return _json_result(await read_guide(rt, principal, args["toolkit"], project=args.get("project")))
        except (NotFound, InvalidParams) as exc:
            return _error_result(exc)
    try:  # the runner's target takes the one call pipeline
        return await call_tool(
            rt,
            principal,
            args["tool"],
            args.get("input") or {},
            project=args.get("project"),
            runner=name,
            on_progress=on_progress,
            on_log=on_log,
        )
    except (InvalidParams, UpstreamError) as exc:
        return _error_result(exc)


async def list_toolkits(
    rt: Runtime, principal: Principal, *, project: str | None = None
) -> list[dict[str, Any]]:
    def gather(r: SyncReader) -> tuple[list[Toolkit], dict[int, list[str]]]:
        scope = visibility.scope_in(r, principal)
        kits = store.list_toolkits_in(r, project=project, scope=scope)
        return kits, store.tool_names_by_toolkit_in(r, [k.id for k in kits], scope=scope)

    async with rt.db.read() as conn:
        kits, names = await conn.batch(gather)
    return [
        {
            "toolkit": k.slug,
            "project": k.project,
            "title": k.title,
            "has_guide": bool(k.guide),
            "health": k.health,
            "tools": names.get(k.id, []),
        }
        for k in kits
    ]


async def describe_tools(
    rt: Runtime, principal: Principal, names: list[str], *, project: str | None = None
) -> dict[str, Any]:
    wanted = list(dict.fromkeys(names))
    async with rt.db.read() as conn:
        tools = await conn.batch(
            lambda r: store.tools_named_in(
                r, wanted, project=project, scope=visibility.scope_in(r, principal)
            )
        )
    by_name: dict[str, list[Tool]] = {}
    for tool in tools:
        by_name.setdefault(tool.name, []).append(tool)
    out: dict[str, Any] = {"tools": [describe(t) for n in wanted for t in by_name.get(n, [])]}
    missing = [n for n in wanted if n not in by_name]
    if missing:
        out["unknown"] = missing
    return out


async def read_guide(
    rt: Runtime, principal: Principal, toolkit: str, *, project: str | None = None
) -> dict[str, Any]:
    async with rt.db.read() as conn:
        kits = await conn.batch(
            lambda r: store.find_toolkits_in(
                r, toolkit, project=project, scope=visibility.scope_in(r, principal)
            )
        )
    if not kits:
        raise NotFound(f"unknown toolkit {toolkit!r}; see list_toolkits", field="toolkit")
    if len(kits) > 1:
        projects = [k.project for k in kits]
        raise InvalidParams(
            f"toolkit {toolkit!r} is installed in several projects ({', '.join(projects)}); name one",
            field="project",
            data={"projects": projects},
        )
    kit = kits[0]
    guide = kit.guide or f"{kit.title}\n\n{kit.description}".strip() or "This toolkit has no guide."
    return {"toolkit": kit.slug, "project": kit.project, "guide": guide}


__all__ = ["BRIDGE_NAMES", "BRIDGE_TOOLS", "RUNNERS", "call_bridge", "list_tools", "unknown_tool"]
