"""A JSON-lines tool catalogue → a ToolkitDraft (pure; no base URL, no binding).

One object a line: ``toolkit``, ``name``, ``description``, ``input_schema`` and an
optional ``kind`` (the retrieval benchmarks' format). A bad line fails the whole file,
because a half-imported catalogue would silently miss tools. Schemas get only minimal
repairs (type aliases such as BFCL's ``dict``/``float``, draft-4 boolean
``exclusiveMinimum``, tuple ``items``), then must pass the Draft 2020-12 meta-schema.
"""

from __future__ import annotations

from typing import Any, cast

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from appliance.catalogue.naming import assign_names, validate_slug
from appliance.catalogue.schema_values import TYPE_ALIASES, normalise_type, trim
from appliance.errors import ImportFailed
from appliance.models import KINDS, Kind, ToolDraft, ToolkitDraft

DESCRIPTION_LIMIT = 2000
_OLD_DRAFTS = ("draft-04", "draft-06", "draft-07")


def convert_catalog(data: bytes, slug: str, *, source: str = "", max_bytes: int) -> ToolkitDraft:
    """Convert catalogue bytes; ImportFailed names the line and field of the first problem."""
    validate_slug(slug)
    if len(data) > max_bytes:
        raise ImportFailed(f"catalogue is {len(data)} bytes; the limit is {max_bytes}", field="document")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFailed(
            f"catalogue is not UTF-8 (bad byte at offset {exc.start})", field="document"
        ) from None
    rows: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            rows.append((number, _row(number, line)))
    single = len({row["toolkit"] for _, row in rows}) <= 1
    seen: dict[tuple[str, str], int] = {}
    for number, row in rows:
        key = (row["toolkit"], row["name"])
        if key in seen:
            raise ImportFailed(
                f"line {number}: tool {row['toolkit']}/{row['name']} repeats line {seen[key]}",
                field=f"line {number}",
            )
        seen[key] = number
    names = assign_names(
        slug,
        [
            (r["name"] if single else f"{r['toolkit']}_{r['name']}", f"{r['toolkit']}/{r['name']}")
            for _, r in rows
        ],
    )
    tools = [
        ToolDraft(
            name=name,
            upstream_name=row["name"],
            group=row["toolkit"],
            title=row["name"],
            description=trim(row["description"], DESCRIPTION_LIMIT),
            kind=row["kind"],
            input_schema=row["input_schema"],
        )
        for name, (_, row) in zip(names, rows, strict=True)
    ]
    toolkits = sorted({t.group for t in tools})
    return ToolkitDraft(
        slug=slug,
        source_kind="catalog",
        title=toolkits[0] if len(toolkits) == 1 else slug,
        description=f"{len(tools)} tools from {len(toolkits)} toolkit(s)",
        guide="",
        base_url=None,
        tools=tools,
        source=source,
        meta={"toolkits": len(toolkits)},
    )


def _row(number: int, line: str) -> dict[str, Any]:
    def fail(message: str, field: str | None = None) -> ImportFailed:
        return ImportFailed(
            f"line {number}: {message}", field=f"line {number}" + (f": {field}" if field else "")
        )

    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise fail(f"not valid JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise fail("must be a JSON object")
    for key in ("toolkit", "name"):
        if not isinstance(obj.get(key), str) or not obj[key].strip():
            raise fail(f"{key} must be a non-empty string", key)
    description = obj.get("description", "")
    if not isinstance(description, str):
        raise fail("description must be a string", "description")
    kind = obj.get("kind", "read")
    if kind not in KINDS:
        raise fail(f"kind must be one of {', '.join(KINDS)}", "kind")
    schema = obj.get("input_schema", {"type": "object", "properties": {}})
    if not isinstance(schema, dict):
        raise fail("input_schema must be an object", "input_schema")
    schema = repair_schema(schema)
    if "type" not in schema:
        schema = {"type": "object", **schema}
    if schema.get("type") != "object":
        raise fail("input_schema must describe an object (type: object)", "input_schema")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise fail(
            f"input_schema is not valid JSON Schema at /{where}: {exc.message}", "input_schema"
        ) from None
    return {
        "toolkit": obj["toolkit"],
        "name": obj["name"],
        "description": description,
        "kind": cast(Kind, kind),
        "input_schema": schema,
    }


def repair_schema(node: Any) -> Any:
    """A copy with the minimal repairs that make common tool schemas Draft 2020-12 valid."""
    if isinstance(node, list):
        return [repair_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {key: repair_schema(value) for key, value in node.items()}
    raw_type = out.get("type")
    if isinstance(raw_type, str | list) and _needs_type_fix(raw_type):
        types = normalise_type(raw_type)
        if types:
            out["type"] = types[0] if len(types) == 1 else types
        else:
            out.pop("type")
    for key, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(key) is True and bound in out:
            out[key] = out.pop(bound)  # draft-04 boolean form
        elif isinstance(out.get(key), bool):
            out.pop(key)
    if isinstance(out.get("items"), list):
        out["prefixItems"] = out.pop("items")
    schema_uri = out.get("$schema")
    if isinstance(schema_uri, str) and any(d in schema_uri for d in _OLD_DRAFTS):
        out.pop("$schema")  # the repaired schema is 2020-12 now
    return out


def _needs_type_fix(raw: str | list[Any]) -> bool:
    items = raw if isinstance(raw, list) else [raw]
    return any(not isinstance(t, str) or t in TYPE_ALIASES or t != t.lower() for t in items)
