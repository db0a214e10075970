"""What the bridge tools answer, rendered in one place: every byte here lands in a model's context.

* ``describe_tools`` gives a tool in full (``describe``): its whole description and schema.
* ``search_tools`` gives each result compact (``result``): exact name, kind, runner, health,
  version, a short description and the compact schema of ``catalogue/schema_compact.py``
  (every argument, short prose), the answer's shared sub-schemas folded into one ``defs``.
* ``list_toolkits`` gives tool names without their ``<toolkit>__`` prefix (the callable name is
  ``<toolkit>__<name>``); its brief form groups them by domain (the tool's group: OpenAPI tag,
  MCP server group, catalogue toolkit) with one line each.
"""

from __future__ import annotations

from typing import Any

from appliance.catalogue.naming import SEPARATOR
from appliance.catalogue.schema_compact import TOOL_DESCRIPTION, compact, fold, short
from appliance.db import dumps
from appliance.models import CallResult, Tool, Toolkit

LINE = 80  # characters of a tool's line in the brief listing
OTHER = "other"  # the domain of a tool without a group


def _identity(tool: Tool) -> dict[str, Any]:
    """What names a tool and says how to run it: the same in full and in brief."""
    return {
        "name": tool.name,
        "project": tool.project,
        "kind": tool.kind,
        "runner": tool.runner,
        "health": tool.health,
    }


def describe(tool: Tool) -> dict[str, Any]:
    """A tool in full, as ``describe_tools``, the admin API and the CLI show it."""
    full = {"toolkit": tool.toolkit, "description": tool.description or tool.title}
    return {**_identity(tool), **full, "input_schema": tool.input_schema}


def result(tool: Tool) -> dict[str, Any]:
    """A search result: enough to pick the tool and call it; ``describe_tools`` has the rest."""
    text = short(tool.description or tool.title, TOOL_DESCRIPTION)
    return {**_identity(tool), "description": text, "input": _input(tool.input_schema)}


def marked(connected: dict[int, bool]) -> Any:
    """``result`` with ``"connected"`` on a per_user toolkit's tools: whether the caller has a
    working connection there (absent for shared toolkits: a few bytes only where it matters)."""

    def render(tool: Tool) -> dict[str, Any]:
        out = result(tool)
        if tool.toolkit_id in connected:
            out["connected"] = connected[tool.toolkit_id]
        return out

    return render


def _input(schema: dict[str, Any]) -> dict[str, Any]:
    out = compact(schema)
    if out.get("type") == "object":  # a tool's input is always an object (MCP): no need to say
        del out["type"]
    return out


def fold_search(answer: dict[str, Any]) -> dict[str, Any]:
    """A search answer with the sub-schemas its results share moved into one ``defs``."""
    results = [r for g in answer.get("groups", [answer]) for r in g.get("results", [])]
    schemas, defs = fold([r["input"] for r in results])
    for r, s in zip(results, schemas, strict=True):
        r["input"] = s
    return {**answer, "defs": defs} if defs else answer


def _short_name(kit: Toolkit, name: str) -> str:
    prefix = kit.slug + SEPARATOR
    return name[len(prefix) :] if name.startswith(prefix) else name  # every tool has it (naming.py)


def kit_fields(kit: Toolkit) -> dict[str, Any]:
    return {
        "toolkit": kit.slug,
        "project": kit.project,
        "title": kit.title,
        "health": kit.health,
        "has_guide": bool(kit.guide),
    }


def toolkit_index(kits: list[Toolkit], names: dict[int, list[str]]) -> dict[str, Any]:
    """``list_toolkits``: each toolkit with its tools' names, prefix left off."""
    return {
        "toolkits": [
            {**kit_fields(k), "tools": [_short_name(k, n) for n in names.get(k.id, [])]} for k in kits
        ]
    }


def toolkit_brief(kits: list[Toolkit], lines: dict[int, list[tuple[str, str, str]]]) -> dict[str, Any]:
    """``list_toolkits`` brief: each toolkit's tools by domain, ``{name: one line}``."""
    out = []
    for k in kits:
        domains: dict[str, dict[str, str]] = {}
        for name, group, text in lines.get(k.id, []):
            domains.setdefault(group or OTHER, {})[_short_name(k, name)] = short(text, LINE)
        out.append({**kit_fields(k), "domains": dict(sorted(domains.items()))})
    return {"toolkits": out}


def json_result(value: dict[str, Any]) -> CallResult:
    """One answer, given as structuredContent and as its JSON in a text block.

    Both MCP revisions we speak (2025-11-25, 2026-07-28) say that a tool returning structured
    content SHOULD also return the serialised JSON in a TextContent block, for clients that
    predate structuredContent; a client passes its model one of the two, so the copies cost a
    model one answer. What makes answers small is their content, never dropping a copy.
    """
    return CallResult(content=[{"type": "text", "text": dumps(value)}], structured=value)


__all__ = [
    "describe",
    "fold_search",
    "json_result",
    "kit_fields",
    "marked",
    "result",
    "toolkit_brief",
    "toolkit_index",
]
