"""An MCP server's ``tools/list`` → tool drafts (pure).

Names become ``<slug>__<upstream name>``; the upstream name is kept verbatim for the call
(and for ``/mcp/<slug>``, which serves tools under their own names). Kinds follow the MCP
specification's annotation defaults: ``readOnlyHint`` defaults to false and
``destructiveHint`` to true, so a tool that says nothing is treated as destructive and a
client's approval prompt errs on the side of caution.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator, SchemaError

from appliance.catalogue.catalog_jsonl import repair_schema
from appliance.catalogue.naming import assign_names
from appliance.catalogue.schema_values import trim
from appliance.errors import ImportFailed
from appliance.models import Kind, Skipped, ToolDraft, ToolkitDraft

MAX_TOOLS = 5000
_PERMISSIVE: dict[str, Any] = {"type": "object"}


def kind_from_annotations(annotations: Any) -> Kind:
    ann = annotations if isinstance(annotations, dict) else {}
    if ann.get("readOnlyHint") is True:
        return "read"
    if ann.get("destructiveHint") is False:
        return "write"
    return "destructive"


def _input_schema(raw: Any) -> dict[str, Any]:
    """The tool's schema, minimally repaired; a broken one becomes a permissive object.

    A permissive schema is safe: the upstream validates its own inputs; ours only spares a
    round trip.
    """
    if not isinstance(raw, dict):
        return dict(_PERMISSIVE)
    schema = repair_schema(raw)
    if schema.get("type") != "object":
        schema = {**schema, "type": "object"}
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        return dict(_PERMISSIVE)
    return schema


def convert_tools_list(
    tools: list[Any],
    slug: str,
    *,
    title: str = "",
    description: str = "",
    guide: str = "",
    source: str = "",
    meta: dict[str, Any] | None = None,
) -> ToolkitDraft:
    """Drafts for every usable tool; malformed entries are skipped with a reason."""
    if not isinstance(tools, list):
        raise ImportFailed("the upstream's tools/list result has no 'tools' array", field="tools")
    if len(tools) > MAX_TOOLS:
        raise ImportFailed(
            f"the upstream lists {len(tools)} tools, over the limit of {MAX_TOOLS}", field="tools"
        )
    usable: list[dict[str, Any]] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        where = f"tool #{index}"
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"]:
            skipped.append(Skipped(where, "no 'name'"))
            continue
        if tool["name"] in seen:
            skipped.append(Skipped(tool["name"], "listed twice; the first is kept"))
            continue
        seen.add(tool["name"])
        usable.append(tool)
    names = assign_names(slug, [(t["name"], t["name"]) for t in usable])
    drafts = []
    for name, tool in zip(names, usable, strict=True):
        raw_annotations = tool.get("annotations")
        annotations: dict[str, Any] = raw_annotations if isinstance(raw_annotations, dict) else {}
        tool_title = tool.get("title") or annotations.get("title") or tool["name"]
        drafts.append(
            ToolDraft(
                name=name,
                upstream_name=tool["name"],
                group="",
                title=trim(str(tool_title), 200),
                description=trim(str(tool.get("description") or ""), 2000),
                kind=kind_from_annotations(annotations),
                input_schema=_input_schema(tool.get("inputSchema")),
                binding={"upstream_name": tool["name"]},
                annotations=dict(annotations),
            )
        )
    return ToolkitDraft(
        slug=slug,
        source_kind="mcp",
        title=title or slug,
        description=description,
        guide=guide,
        base_url=None,
        tools=drafts,
        skipped=skipped,
        source=source,
        meta=dict(meta or {}),
    )
