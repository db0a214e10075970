"""A schema's leaf values (pure): descriptions trimmed, types normalised, keywords kept only
when valid JSON Schema (finite numbers, compilable patterns, JSON-safe enums and defaults).

Shared by the OpenAPI translator (``schema_translate.py``), the JSONL catalogue and the MCP
listing, so every tool description and schema keyword is cleaned the same way.
"""

from __future__ import annotations

import math
import re
from typing import Any

DESCRIPTION_LIMIT = 300
_JSON_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}
TYPE_ALIASES = {
    "dict": "object",
    "map": "object",
    "float": "number",
    "double": "number",
    "decimal": "number",
    "int": "integer",
    "long": "integer",
    "bool": "boolean",
    "list": "array",
    "tuple": "array",
    "str": "string",
    "text": "string",
    "file": "string",  # Swagger 2.0 upload; the caller passes content as a string
}
_NONNEG_INT_KEYS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")


def trim(text: Any, limit: int = DESCRIPTION_LIMIT) -> str:
    """Whitespace-normalised text cut at a word boundary near ``limit``."""
    if not isinstance(text, str):
        return ""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def json_safe(value: Any) -> bool:
    """True if ``value`` survives a JSON round trip (YAML can produce bytes, sets, NaN)."""
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(json_safe(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and json_safe(v) for k, v in value.items())
    return False


def normalise_type(raw: Any) -> list[str]:
    """JSON Schema type names from a spec's ``type`` (string or list; aliases mapped)."""
    items = raw if isinstance(raw, list) else [raw]
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            continue
        name = TYPE_ALIASES.get(item.lower(), item.lower())
        if name in _JSON_TYPES and name not in out:
            out.append(name)
    return out


def valid_regex(pattern: Any) -> bool:
    if not isinstance(pattern, str):
        return False
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def copy_scalars(s: dict[str, Any], out: dict[str, Any], nullable: bool) -> int:
    """Copies the valid leaf keywords; returns roughly how many bytes they add."""
    added = 0
    enum = s.get("enum")
    if isinstance(enum, list):
        values = [v for v in enum if json_safe(v)]
        if nullable and None not in values:
            values.append(None)
        out["enum"] = values
        added += sum(len(str(v)) + 4 for v in values)
    for key in ("const", "default"):
        if key in s and json_safe(s[key]):
            out[key] = s[key]
    if isinstance(s.get("format"), str):
        out["format"] = s["format"]
    if valid_regex(s.get("pattern")):
        out["pattern"] = s["pattern"]
    for key in ("minimum", "maximum"):
        if _number(s.get(key)):
            out[key] = s[key]
    for key, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = s.get(key)
        if value is True and bound in out:
            out[key] = out.pop(bound)  # OAS 3.0 / Swagger boolean form
        elif _number(value):
            out[key] = value
    if _number(s.get("multipleOf")) and s["multipleOf"] > 0:
        out["multipleOf"] = s["multipleOf"]
    for key in _NONNEG_INT_KEYS:
        value = s.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            out[key] = value
    if isinstance(s.get("uniqueItems"), bool) and out.get("type", "array") in (
        "array",
        ["array", "null"],
    ):
        out["uniqueItems"] = s["uniqueItems"]  # Kubernetes sets it on strings, too
    return added + 12 * (len(out) - ("properties" in out) - ("description" in out))
