"""``/mcp/<slug>``: one toolkit served as its own MCP server, without the bridge.

For clients that want a single server directly. Tools keep their own names: an MCP
toolkit's upstream names (so a client configured for the original server works
unchanged), an OpenAPI or catalogue toolkit's action part (``listPets`` for
``petstore__listPets``), since operation ids may hold characters MCP names may not.
Every call still takes the gateway's one call path (``calls.call_tool``).
"""

from __future__ import annotations

from typing import Any

from appliance.catalogue import store
from appliance.catalogue.naming import SEPARATOR
from appliance.errors import InvalidParams, NotFound
from appliance.gateway.calls import call_tool, unknown_tool
from appliance.gateway.runtime import Runtime
from appliance.models import CallResult, Principal, Tool, Toolkit
from appliance.upstream.mcp_session import ProgressCallback


def own_name(tool: Tool) -> str:
    if tool.source_kind == "mcp":
        return tool.upstream_name
    return tool.name.split(SEPARATOR, 1)[1] if SEPARATOR in tool.name else tool.name


def _annotations(tool: Tool) -> dict[str, Any]:
    if tool.source_kind == "mcp" and tool.annotations:
        return dict(tool.annotations)
    # Say what the kind means in the specification's terms, so approval prompts are right.
    return {
        "readOnlyHint": tool.kind == "read",
        "destructiveHint": tool.kind == "destructive",
        "openWorldHint": True,
    }


async def resolve_toolkit(rt: Runtime, slug: str, *, project: str | None = None) -> Toolkit:
    async with rt.db.read() as conn:
        kits = await store.find_toolkits(conn, slug, project=project)
    if not kits:
        raise NotFound(f"no toolkit {slug!r}", field="toolkit")
    if len(kits) > 1:
        projects = [k.project for k in kits]
        raise InvalidParams(
            f"toolkit {slug!r} is installed in several projects ({', '.join(projects)}); "
            f"use /mcp/<project>/{slug}",
            field="project",
            data={"projects": projects},
        )
    return kits[0]


async def list_tools(rt: Runtime, kit: Toolkit) -> list[dict[str, Any]]:
    async with rt.db.read() as conn:
        tools = await store.tools_in_toolkit(conn, kit.id)
    out = []
    for tool in tools:
        entry: dict[str, Any] = {
            "name": own_name(tool),
            "description": tool.description or tool.title,
            "inputSchema": tool.input_schema,
            "annotations": _annotations(tool),
        }
        if tool.title:
            entry["title"] = tool.title
        out.append(entry)
    return sorted(out, key=lambda t: t["name"])


async def call(
    rt: Runtime,
    principal: Principal,
    kit: Toolkit,
    name: str,
    arguments: dict[str, Any],
    *,
    on_progress: ProgressCallback | None = None,
) -> CallResult:
    async with rt.db.read() as conn:
        tools = await store.tools_in_toolkit(conn, kit.id)
    tool = next((t for t in tools if own_name(t) == name), None)
    if tool is None:
        raise unknown_tool(name)
    return await call_tool(rt, principal, tool.name, arguments, project=kit.project, on_progress=on_progress)
