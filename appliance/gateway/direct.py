"""``/mcp/<slug>``: one toolkit served as its own MCP server, without the bridge.

For clients that want a single server directly. Tools keep their own names: an MCP
toolkit's upstream names (so a client configured for the original server works
unchanged), an OpenAPI or catalogue toolkit's action part (``listPets`` for
``petstore__listPets``), since operation ids may hold characters MCP names may not.
Every call still takes the gateway's one call pipeline (``pipeline.call_tool``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from appliance.access import visibility
from appliance.catalogue import naming, store
from appliance.catalogue.naming import SEPARATOR
from appliance.db import SyncReader
from appliance.errors import InvalidParams, NotFound, Unauthorized
from appliance.gateway import audit, policy
from appliance.gateway.calls import unknown_tool
from appliance.gateway.pipeline import call_tool
from appliance.gateway.runtime import Runtime
from appliance.models import CallResult, Principal, Scope, Tool, Toolkit
from appliance.protocol.relays import LogRelay, ProgressCallback


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


def tool_entry(tool: Tool, name: str) -> dict[str, Any]:
    """A tool as ``tools/list`` shows it, under ``name``."""
    entry: dict[str, Any] = {
        "name": name,
        "description": tool.description or tool.title,
        "inputSchema": tool.input_schema,
        "annotations": _annotations(tool),
    }
    if tool.title:
        entry["title"] = tool.title
    return entry


async def resolve_toolkit(
    rt: Runtime, principal: Principal, slug: str, *, project: str | None = None
) -> Toolkit:
    """The toolkit ``/mcp/<slug>`` serves, among those the caller sees (else: no such toolkit)."""
    # Remembered until the database changes, per caller (the scope is the caller's).
    kits: list[Toolkit] = await rt.db.cached(
        ("find_toolkits", slug, project, principal),
        lambda conn: conn.batch(
            lambda r: store.find_toolkits_in(
                r, slug, project=project, scope=visibility.scope_in(r, principal)
            )
        ),
    )
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


async def _tools(rt: Runtime, principal: Principal, kit: Toolkit, *, runnable: bool = False) -> list[Tool]:
    """The toolkit's tools the caller sees; ``runnable``: only those the call policy lets run
    (what ``tools/list`` shows). A call looks among all it sees, so that the pipeline's policy
    stage refuses a guarded tool with its reason rather than as an unknown name."""

    def scope(r: SyncReader) -> Scope:
        return policy.runnable_in(r, rt, principal) if runnable else visibility.scope_in(r, principal)

    tools: list[Tool] = await rt.db.cached(
        ("tools_in_toolkit", kit.id, principal, runnable),
        lambda conn: conn.batch(lambda r: store.tools_in_toolkit_in(r, kit.id, scope=scope(r))),
    )
    return tools


async def list_tools(rt: Runtime, principal: Principal, kit: Toolkit) -> list[dict[str, Any]]:
    out = [tool_entry(tool, own_name(tool)) for tool in await _tools(rt, principal, kit, runnable=True)]
    return sorted(out, key=lambda t: t["name"])


async def tool_named(rt: Runtime, principal: Principal, kit: Toolkit, name: str) -> Tool | None:
    """The toolkit's tool the caller calls ``name`` on ``/mcp/<slug>`` (None: none they see)."""
    return next((t for t in await _tools(rt, principal, kit) if own_name(t) == name), None)


async def input_schema(rt: Runtime, principal: Principal, kit: Toolkit, name: str) -> dict[str, Any] | None:
    """The input schema the caller sees for the toolkit's tool ``name`` (None: no such tool for
    them, so a hidden tool's headers are never checked: no oracle for its existence)."""
    tool = next((t for t in await _tools(rt, principal, kit) if own_name(t) == name), None)
    return None if tool is None else tool.input_schema


async def call(
    rt: Runtime,
    principal: Principal,
    kit: Toolkit,
    name: str,
    arguments: dict[str, Any],
    *,
    on_progress: ProgressCallback | None = None,
    on_log: LogRelay | None = None,
    approval: str | None = None,
    key: str | None = None,
) -> CallResult:
    if principal.anonymous:
        raise Unauthorized("calling a tool needs an API key: send 'Authorization: Bearer <key>'")
    tools = await _tools(rt, principal, kit)
    tool = next((t for t in tools if own_name(t) == name), None)
    if tool is None:
        # Did-you-mean among this toolkit's names the caller sees (bounded; off the loop).
        own = [own_name(t) for t in tools]
        refusal = unknown_tool(name, await asyncio.to_thread(naming.close_names, name, own))
        await audit.refused(rt, principal, name, refusal)  # one audit row per attempt
        raise refusal
    return await call_tool(
        rt,
        principal,
        tool.name,
        arguments,
        project=kit.project,
        on_progress=on_progress,
        on_log=on_log,
        approval=approval,
        key=key,
    )
