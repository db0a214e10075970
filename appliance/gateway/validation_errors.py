"""jsonschema's refusals → what an agent reads: every error (up to a bound), reason first.

jsonschema's own messages start with the offending value (``'xxxx…' is too long``), so a
long value pushed the reason past any sensible cut. Here each error is written from its
keyword and the schema's value, and the instance is quoted last and short: an agent learns
what is wrong at which pointer even when it sent a megabyte. The message, the pointers and
the list are all bounded, so a call with a thousand bad items gets an answer of a few KB.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
from jsonschema.exceptions import ValidationError, best_match, relevance

MAX_LISTED = 10  # errors spelled out in the message and in data.errors
MAX_COUNTED = 1000  # errors counted at all: beyond this the count says "more than"
QUOTE_CHARS = 40  # a quoted value (an instance, an enum member) in a message
POINTER_CHARS = 200  # a pointer in a message or in data (an agent's key can be any length)

_JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}


def pointer(parts: Iterable[Any]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def quote(value: Any) -> str:
    """A value as JSON, at most QUOTE_CHARS long (a long string says how long it was)."""
    if isinstance(value, str) and len(value) > QUOTE_CHARS:
        # Cut before encoding: the work stays small however long the value.
        return _clip(orjson.dumps(value[:QUOTE_CHARS]).decode(), QUOTE_CHARS) + f" ({len(value)} characters)"
    if isinstance(value, (list, dict)) and len(value) > QUOTE_CHARS:
        return f"{_type_of(value)} of {len(value)} {'items' if isinstance(value, list) else 'properties'}"
    try:
        text = orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        text = repr(value)
    return _clip(text, QUOTE_CHARS)


def _type_of(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _types(kind: Any) -> str:
    kinds = kind if isinstance(kind, list) else [kind]
    return " or ".join(str(k) for k in kinds[:8])


def _members(values: Any) -> str:
    if not isinstance(values, list):
        return quote(values)
    shown = ", ".join(quote(v) for v in values[:8])
    return f"[{shown}{', …' if len(values) > 8 else ''}]"


def _reason(err: ValidationError) -> str:
    """What is wrong, from the keyword and the schema's value; the instance comes last."""
    v, want, got = err.validator, err.validator_value, err.instance
    size = len(got) if isinstance(got, (str, list, dict)) else None
    reasons: dict[Any, Any] = {
        "type": lambda: f"must be {_types(want)}, got {_type_of(got)} {quote(got)}",
        "enum": lambda: f"must be one of {_members(want)}, got {quote(got)}",
        "const": lambda: f"must be {quote(want)}, got {quote(got)}",
        "maxLength": lambda: f"must be at most {want} characters, got {size}",
        "minLength": lambda: f"must be at least {want} characters, got {size}",
        "maxItems": lambda: f"must have at most {want} items, got {size}",
        "minItems": lambda: f"must have at least {want} items, got {size}",
        "maxProperties": lambda: f"must have at most {want} properties, got {size}",
        "minProperties": lambda: f"must have at least {want} properties, got {size}",
        "uniqueItems": lambda: "must not repeat an item",
        "pattern": lambda: f"must match the pattern {quote(want)}, got {quote(got)}",
        "format": lambda: f"must be a valid {_clip(str(want), QUOTE_CHARS)}, got {quote(got)}",
        "minimum": lambda: f"must be at least {quote(want)}, got {quote(got)}",
        "maximum": lambda: f"must be at most {quote(want)}, got {quote(got)}",
        "exclusiveMinimum": lambda: f"must be greater than {quote(want)}, got {quote(got)}",
        "exclusiveMaximum": lambda: f"must be less than {quote(want)}, got {quote(got)}",
        "multipleOf": lambda: f"must be a multiple of {quote(want)}, got {quote(got)}",
        "anyOf": lambda: f"matches none of the allowed alternatives, got {_type_of(got)} {quote(got)}",
        "oneOf": lambda: f"must match exactly one of the alternatives, got {_type_of(got)} {quote(got)}",
        "not": lambda: f"matches a schema it must not match, got {quote(got)}",
        None: lambda: "is not allowed here",  # a `false` schema
    }
    if v in reasons:
        return str(reasons[v]())
    return f"breaks the schema's {_clip(str(v), QUOTE_CHARS)!r} rule, got {_type_of(got)} {quote(got)}"


Entry = tuple[str, functools.partial[str]]  # a pointer, and its reason (written only if listed)


def _entries(err: ValidationError) -> Iterator[Entry]:
    """One refusal as (pointer, reason) pairs: each missing or unexpected property its own."""
    path = list(err.absolute_path)
    want = err.validator_value
    if err.validator == "required" and isinstance(err.instance, dict) and isinstance(want, list):
        for name in want:
            if isinstance(name, str) and name not in err.instance:
                yield pointer([*path, name]), functools.partial(_missing, name)
        return
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        schema: Any = err.schema
        allowed = set((schema.get("properties") or {}).keys()) if isinstance(schema, dict) else set()
        patterns = schema.get("patternProperties") if isinstance(schema, dict) else None
        extra = [k for k in err.instance if k not in allowed]
        if extra and not patterns:
            for name in sorted(extra):
                yield pointer([*path, name]), functools.partial(_unexpected, name)
            return
    if err.context:  # anyOf/oneOf: jsonschema's pick among the alternatives says more
        deeper = best_match([err])
        if deeper is not None and deeper is not err:
            yield from _entries(deeper)
            return
    yield pointer(path) or "/", functools.partial(_reason, err)


def _missing(name: str) -> str:
    return f"missing required property {quote(name)}"


def _unexpected(name: str) -> str:
    return f"unexpected property {quote(name)}"


def _relevance(err: ValidationError) -> tuple[Any, ...]:
    # jsonschema's ``relevance`` without its tie-break on the path (which makes max() pick the
    # *last* sibling): among equals the first found wins.
    full: tuple[Any, ...] = relevance(err)  # type: ignore[assignment]
    return (full[0], *full[2:])


def describe(taken: list[ValidationError]) -> tuple[str, str, dict[str, Any]]:
    """(message, field, data) for the refusals in ``taken`` (at least one; MAX_COUNTED + 1
    of them mean there were more).

    ``field`` and ``data.path`` name the most relevant error (jsonschema's ``best_match``);
    ``data.errors`` lists up to MAX_LISTED ``{path, message}``, the most relevant first, and
    ``data.error_count`` how many there were (counting stops at MAX_COUNTED)."""
    over = len(taken) > MAX_COUNTED
    taken = taken[:MAX_COUNTED]
    # best_match's pick first (_entries descends into anyOf/oneOf as it does), then the order
    # jsonschema found them in.
    best = max(taken, key=_relevance)
    ordered = [best, *(e for e in taken if e is not best)]
    entries: list[tuple[str, str]] = []
    seen: set[tuple[str, Any]] = set()  # jsonschema may report one `required` twice
    total = 0
    for err in ordered:
        for where, why in _entries(err):
            if (where, why.args) in seen:
                continue
            seen.add((where, why.args))
            if len(entries) < MAX_LISTED:
                entries.append((_clip(where, POINTER_CHARS), why()))
            total += 1
    more = total - len(entries)
    listed = "; ".join(f"{where}: {why}" for where, why in entries)
    if more:
        listed += f"; and {'more than ' if over else ''}{more} more"
    count = f"{'more than ' if over else ''}{total}"
    head = "invalid argument" if total == 1 else f"{count} invalid arguments"
    data = {
        "path": entries[0][0],
        "errors": [{"path": where, "message": why} for where, why in entries],
        "error_count": total,
    }
    return f"{head}: {listed}", entries[0][0], data
