"""The bridge tools an agent sees instead of thousands: search, list, describe, guide, run.

Three runners instead of one so that a client's approval prompt knows what a call can do:
``use_tool`` only reads (readOnlyHint), ``run_tool`` writes, ``run_destructive_tool`` may
delete (destructiveHint). A tool sent to the wrong runner is refused before anything runs.
"""

from __future__ import annotations

from typing import Any

from appliance.catalogue import store
from appliance.errors import ApplianceError, InvalidParams, NotFound, UpstreamError
from appliance.gateway.calls import call_tool, unknown_tool
from appliance.gateway.runtime import Runtime
from appliance.gateway.searching import search_tools
from appliance.gateway.validation import validate_arguments
from appliance.models import RUNNER_FOR_KIND, CallResult, Principal, Tool
from appliance.upstream.mcp_session import ProgressCallback

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
            "service. Each result has the exact tool name, its runner and its full input schema."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What you want to do, or a tool name."},
                "toolkit": {"type": "string", "description": "Only this toolkit."},
                "project": _PROJECT,
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Default 8."},
            },
            "required": ["query"],
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


async def list_tools(rt: Runtime) -> list[dict[str, Any]]:
    """The bridge as ``tools/list`` shows it; ``read_guide`` only when some toolkit has a guide."""
    async with rt.db.read() as conn:
        has_guide = await conn.one("SELECT 1 FROM toolkits WHERE guide != '' LIMIT 1")
    return [t for t in BRIDGE_TOOLS if t["name"] != "read_guide" or has_guide]


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
) -> CallResult:
    """Run one bridge tool. Its own bad arguments raise ArgumentsInvalid (the rpc layer shapes it
    by protocol version); a failing *target* of a runner is an ``isError`` result."""
    spec = next(t for t in BRIDGE_TOOLS if t["name"] == name)
    validate_arguments(spec["inputSchema"], args)
    if name == "search_tools":
        results, ranking = await search_tools(
            rt,
            args["query"],
            toolkit=args.get("toolkit"),
            project=args.get("project"),
            limit=args.get("limit"),
        )
        return _json_result({"results": [describe(t) for t in results], "ranking": ranking})
    if name == "list_toolkits":
        return _json_result({"toolkits": await list_toolkits(rt, project=args.get("project"))})
    if name == "describe_tools":
        return _json_result(await describe_tools(rt, args["names"], project=args.get("project")))
    if name == "read_guide":
        try:
            return _json_result(await read_guide(rt, args["toolkit"], project=args.get("project")))
        except (NotFound, InvalidParams) as exc:
            return _error_result(exc)
    try:
        return await call_tool(
            rt,
            principal,
            args["tool"],
            args.get("input") or {},
            project=args.get("project"),
            runner=name,
            on_progress=on_progress,
        )
    except (InvalidParams, UpstreamError) as exc:
        return _error_result(exc)


async def list_toolkits(rt: Runtime, *, project: str | None = None) -> list[dict[str, Any]]:
    async with rt.db.read() as conn:
        kits = await store.list_toolkits(conn, project=project)
        names = await store.tool_names_by_toolkit(conn, [k.id for k in kits])
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


async def describe_tools(rt: Runtime, names: list[str], *, project: str | None = None) -> dict[str, Any]:
    found: list[dict[str, Any]] = []
    missing: list[str] = []
    async with rt.db.read() as conn:
        for name in dict.fromkeys(names):
            tools = await store.tools_named(conn, name, project=project)
            if tools:
                found.extend(describe(t) for t in tools)
            else:
                missing.append(name)
    out: dict[str, Any] = {"tools": found}
    if missing:
        out["unknown"] = missing
    return out


async def read_guide(rt: Runtime, toolkit: str, *, project: str | None = None) -> dict[str, Any]:
    async with rt.db.read() as conn:
        kits = await store.find_toolkits(conn, toolkit, project=project)
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
