"""The bridge tools an agent sees instead of thousands: search, list, describe, guide, run.

Three runners instead of one so that a client's approval prompt knows what a call can do:
``use_tool`` only reads (readOnlyHint), ``run_tool`` writes, ``run_destructive_tool`` may
delete (destructiveHint). A tool sent to the wrong runner is refused before anything runs.
"""

from __future__ import annotations

from typing import Any

from appliance.access import visibility
from appliance.artifacts import reading
from appliance.catalogue import store, toolkit_reads
from appliance.db import SyncReader
from appliance.errors import (
    ApplianceError,
    ApprovalRefused,
    ApprovalRequired,
    CallRefused,
    InvalidParams,
    NotFound,
    UpstreamError,
)
from appliance.gateway import (
    accounting,
    answers,
    artifacts,
    audit,
    code_runs,
    connections,
    costs,
    policy,
    telemetry,
)
from appliance.gateway.agent_search import MAX_QUERIES, search_for_agent
from appliance.gateway.calls import unknown_tool
from appliance.gateway.direct import tool_entry
from appliance.gateway.pipeline import call_tool
from appliance.gateway.runtime import Runtime
from appliance.gateway.validation import validate_arguments
from appliance.models import RUNNER_FOR_KIND, CallResult, Principal, Tool
from appliance.protocol.relays import LogRelay, ProgressCallback

# What these say is read by a model before every task, so each word has to help it pick and
# call a tool; bounds that only guard the appliance (list lengths, additionalProperties) are
# enforced from the full schemas here but left out of what tools/list shows (``published``).
_PROJECT = {"type": "string"}  # needed only for a name in several projects; errors say so
_RUN_SCHEMA = {
    "type": "object",
    "properties": {
        "tool": {"type": "string"},  # "found by search_tools" says it is the exact name
        "input": {"type": "object"},
        "project": _PROJECT,
        "approval": {"type": "string", "maxLength": 64},  # a retry: the approval that covers it
    },
    "required": ["tool"],
    "additionalProperties": False,
}
_BROWSE = {"readOnlyHint": True, "openWorldHint": False}
# readOnlyHint is false unless said (MCP tool annotations), so the writing runners say only
# whether they may destroy, which is what an approval prompt turns on.


def _runner(name: str, what: str, annotations: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"Run a {what} tool found by search_tools.",
        "inputSchema": _RUN_SCHEMA,
        "annotations": annotations,
    }


_LIST = "Toolkits and tool names (call as <toolkit>__<name>); brief: by domain, one line each."
BRIDGE_TOOLS: list[dict[str, Any]] = [
    {
        "name": "search_tools",
        "description": (
            "Find tools for a task (the outcome, or a service's name): exact name, runner, compact "
            'input ("type: text" properties, $ref into defs).'
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to do, or a tool name."},
                "queries": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_QUERIES,
                    "description": f"Or up to {MAX_QUERIES} steps: results by step.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "use_case": {"type": "string", "minLength": 1},
                            "known_fields": {
                                "type": "string",
                                "description": "'key:value,…' you already hold.",
                            },
                        },
                        "required": ["use_case"],
                        "additionalProperties": False,
                    },
                },
                "toolkit": {"type": "string"},
                "providers": {"type": "array", "items": {"type": "string"}, "maxItems": 50},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 50},  # tool groups
                "project": _PROJECT,
                "limit": {"type": "integer", "minimum": 1, "maximum": 50},
            },
            "additionalProperties": False,
        },
        "annotations": _BROWSE,
    },
    {
        "name": "list_toolkits",
        "description": _LIST,
        "inputSchema": {
            "type": "object",
            "properties": {
                "toolkit": {"type": "string"},
                "project": {"type": "string"},
                "brief": {"type": "boolean"},
            },
            "additionalProperties": False,
        },
        "annotations": _BROWSE,
    },
    {
        "name": "describe_tools",
        "description": "Full schemas by exact name.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "names": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 50},
                "project": _PROJECT,
            },
            "required": ["names"],
            "additionalProperties": False,
        },
        "annotations": _BROWSE,
    },
    {
        "name": "read_guide",
        "description": "A toolkit's usage notes.",
        "inputSchema": {
            "type": "object",
            "properties": {"toolkit": {"type": "string"}, "project": _PROJECT},
            "required": ["toolkit"],
            "additionalProperties": False,
        },
        "annotations": _BROWSE,
    },
    {
        "name": "read_result",
        "description": "Read a kept result as its note says.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "handle": {"type": "string"},
                "offset": {"type": "integer", "minimum": 0},
                "line": {"type": "integer", "minimum": 1},
                "match": {"type": "string", "minLength": 1, "maxLength": reading.MAX_NEEDLE},
                "path": {"type": "string", "minLength": 1, "maxLength": reading.MAX_PATH},
            },
            "required": ["handle"],
            "additionalProperties": False,
        },
        "annotations": _BROWSE,
    },
    # openWorldHint is true unless said (MCP tool annotations): the runners reach the world
    _runner("use_tool", "read-only", {"readOnlyHint": True}),
    _runner("run_tool", "write", {"destructiveHint": False}),
    _runner("run_destructive_tool", "destructive", {"destructiveHint": True}),
]
BRIDGE_NAMES = {t["name"] for t in BRIDGE_TOOLS}
RUNNERS = set(RUNNER_FOR_KIND.values())


# Keywords that only guard the appliance: enforced, but not worth a model's tokens.
_GUARDS = frozenset({"additionalProperties", "minItems", "maxItems", "minLength", "maxLength", "minimum"})


# A runner's ``approval`` is told to the model by the answer that asks for it (its text says
# what to send), so tools/list need not spend its tokens on every task.
_TOLD_WHEN_NEEDED = frozenset({"approval"})


def _published(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: _published(
                {p: v for p, v in v.items() if p not in _TOLD_WHEN_NEEDED} if k == "properties" else v
            )
            for k, v in node.items()
            if k not in _GUARDS
        }
    return node


PUBLISHED = [{**t, "inputSchema": _published(t["inputSchema"])} for t in BRIDGE_TOOLS]
# The code tools (issue 24), listed and served only where the operator turned them on.
CODE_PUBLISHED = [{**t, "inputSchema": _published(t["inputSchema"])} for t in code_runs.CODE_TOOLS]


def serves(rt: Runtime, name: str) -> bool:
    """Whether ``name`` is a bridge tool here (the code tools only when turned on)."""
    return name in BRIDGE_NAMES or (name in code_runs.CODE_NAMES and rt.settings.code_tools)


async def list_tools(rt: Runtime, principal: Principal) -> list[dict[str, Any]]:
    """The bridge as ``tools/list`` shows it, then the caller's preloaded tools.

    ``read_guide`` appears only when a toolkit the caller sees has a guide. Preloaded tools
    are listed under their full names, limited to what the caller may call (a name outside
    its scope is silently left out: preloading never widens access).
    """

    def gather(r: SyncReader) -> tuple[bool, list[Tool]]:
        scope = policy.runnable_in(r, rt, principal)  # a preloaded tool that could not run is left out
        has_guide = toolkit_reads.any_guide_in(r, scope)
        preloaded = store.tools_named_in(r, principal.preload, scope=scope) if principal.preload else []
        return has_guide, preloaded

    async with rt.db.read() as conn:
        has_guide, preloaded = await conn.batch(gather)
    listed = [t for t in PUBLISHED if t["name"] != "read_guide" or has_guide]
    if rt.settings.code_tools:
        listed.extend(CODE_PUBLISHED)
    seen = set(BRIDGE_NAMES) | code_runs.CODE_NAMES
    for tool in preloaded:
        if tool.name not in seen:  # a name in two projects is listed once; calls name the project
            seen.add(tool.name)
            listed.append(tool_entry(tool, tool.name))
    return listed


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
    approval: str | None = None,
    key: str | None = None,
    asker: code_runs.Ask | None = None,
) -> CallResult:
    """Run one bridge tool. Its own bad arguments raise ArgumentsInvalid (the rpc layer shapes it
    by protocol version); a failing *target* of a runner is an ``isError`` result."""
    if name in code_runs.CODE_NAMES:  # a script: each of its calls takes the pipeline
        try:
            validate_arguments(code_runs.CODE_SCHEMA, args)
            return await code_runs.run(rt, principal, name, args, approval=approval, asker=asker)
        except InvalidParams as exc:  # a script refused before it ran is an attempt all the same
            await audit.refused(rt, principal, name, exc, runner=name)
            raise
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
        # A per_user toolkit's results say whether the caller is connected (issue 19).
        marks = await connections.search_marks(rt, principal)
        render = answers.result if not marks else answers.marked(marks)
        with telemetry.timed_search():
            found = await search_for_agent(rt, args, render, principal=principal, can_install=may_install)
        _note_search(rt, principal, args, found)
        return answers.json_result(answers.fold_search(found))
    if name == "list_toolkits":
        return answers.json_result(
            await toolkit_listing(
                rt,
                principal,
                toolkit=args.get("toolkit"),
                project=args.get("project"),
                brief=bool(args.get("brief")),
            )
        )
    if name == "describe_tools":
        return answers.json_result(
            await describe_tools(rt, principal, args["names"], project=args.get("project"))
        )
    if name == "read_result":
        try:
            return answers.json_result(await artifacts.read_result(rt, principal, args))
        except (NotFound, InvalidParams) as exc:
            return _error_result(exc)
    if name == "read_guide":
        try:
            return answers.json_result(
                await read_guide(rt, principal, args["toolkit"], project=args.get("project"))
            )
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
            aside=True,
            approval=args.get("approval") or approval,
            key=key,
        )
    except (ApprovalRequired, ApprovalRefused):
        raise  # the request stage frees the idempotency key; rpc/mcp.py answers it as a result
    except (InvalidParams, UpstreamError, CallRefused) as exc:  # the model reads why, as a result
        return _error_result(exc)


def _note_search(rt: Runtime, principal: Principal, args: dict[str, Any], found: dict[str, Any]) -> None:
    """Each use case's query and the names it showed, for the usage log (never its arguments)."""
    if not rt.usage.records(principal):
        return
    if "groups" in found:
        for group in found["groups"]:
            rt.usage.searched(principal, group["use_case"], [r["name"] for r in group["results"]])
    else:
        rt.usage.searched(principal, args["query"], [r["name"] for r in found["results"]])


def _kits_in(
    rt: Runtime, r: SyncReader, principal: Principal, toolkit: str | None, project: str | None
) -> tuple[list[Any], Any]:
    scope = policy.runnable_in(r, rt, principal)  # only tools that could run are listed
    kits = store.list_toolkits_in(r, project=project, scope=scope)
    return [k for k in kits if toolkit is None or k.slug == toolkit], scope


async def list_toolkits(
    rt: Runtime, principal: Principal, *, project: str | None = None
) -> list[dict[str, Any]]:
    """The toolkits ``principal`` sees with their tools' full names (the admin API's listing)."""

    def gather(r: SyncReader) -> tuple[list[Any], dict[int, list[str]]]:
        kits, scope = _kits_in(rt, r, principal, None, project)
        return kits, store.tool_names_by_toolkit_in(r, [k.id for k in kits], scope=scope)

    async with rt.db.read() as conn:
        kits, names = await conn.batch(gather)
    return [
        {**answers.kit_fields(k), "allowed_hosts": list(k.allowed_hosts), "tools": names.get(k.id, [])}
        for k in kits
    ]


async def toolkit_listing(
    rt: Runtime, principal: Principal, *, toolkit: str | None, project: str | None, brief: bool
) -> dict[str, Any]:
    """``list_toolkits`` as an agent gets it: short names, or (brief) one line per tool by domain."""

    def gather(r: SyncReader) -> tuple[list[Any], Any]:
        kits, scope = _kits_in(rt, r, principal, toolkit, project)
        ids = [k.id for k in kits]
        if brief:
            return kits, store.tool_lines_by_toolkit_in(r, ids, scope=scope)
        return kits, store.tool_names_by_toolkit_in(r, ids, scope=scope)

    async with rt.db.read() as conn:
        kits, rows = await conn.batch(gather)
    return answers.toolkit_brief(kits, rows) if brief else answers.toolkit_index(kits, rows)


async def describe_tools(
    rt: Runtime, principal: Principal, names: list[str], *, project: str | None = None
) -> dict[str, Any]:
    wanted = list(dict.fromkeys(names))
    async with rt.db.read() as conn:
        tools = await conn.batch(
            lambda r: store.tools_named_in(
                r, wanted, project=project, scope=policy.runnable_in(r, rt, principal)
            )
        )
    by_name: dict[str, list[Tool]] = {}
    for tool in tools:
        by_name.setdefault(tool.name, []).append(tool)
    priced = await costs.of(rt, principal, tools)
    out: dict[str, Any] = {
        "tools": [{**answers.describe(t), **priced.get(t.id, {})} for n in wanted for t in by_name.get(n, [])]
    }
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


__all__ = [
    "BRIDGE_NAMES",
    "BRIDGE_TOOLS",
    "PUBLISHED",
    "RUNNERS",
    "call_bridge",
    "list_tools",
    "unknown_tool",
]
