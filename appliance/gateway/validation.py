"""Tool arguments checked against the tool's input schema before anything leaves.

The error names the JSON pointer of the offending value (``/body/name``) or, for a
missing property, the pointer where it should be (``/petId``), and lists every error (up
to a bound, reason before value: ``validation_errors.py``), so an agent can fix the call.
Validators are compiled once per schema text and cached.

Most tools' schemas are plain objects of typed properties. For those a compiled quick
check answers "valid" first (a tenth of jsonschema's time on every call); it only ever
says valid or "ask jsonschema", never invalid, so jsonschema alone decides every refusal
and writes every message, and a schema using anything beyond the plain subset is
jsonschema's from the start.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import jsonschema
import orjson

from appliance.errors import ArgumentsInvalid
from appliance.gateway.patterns import bounded_pattern
from appliance.gateway.validation_errors import MAX_COUNTED, describe


@functools.lru_cache(maxsize=4096)
def _validator(schema_json: bytes) -> Any:
    schema = orjson.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        # A stored schema that is not valid JSON Schema must not block every call; validate
        # against the permissive core of it (types and required) instead of crashing.
        schema = {k: schema[k] for k in ("type", "required") if k in schema}
    return _bounded(cls)(schema)


@functools.lru_cache(maxsize=16)
def _bounded(cls: Any) -> Any:
    # An upstream's `pattern` meets a caller's string: asserted only where its work is bounded.
    return jsonschema.validators.extend(cls, {"pattern": bounded_pattern})


# Keywords the quick check understands, and annotations that never affect validity (format
# too: jsonschema here runs without a format checker, so formats are not asserted).
_QUICK_KEYS = frozenset({"type", "properties", "required", "additionalProperties", "items"})
_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$schema", "$comment", "deprecated",
     "readOnly", "writeOnly", "format", "$id"}
)  # fmt: skip
Check = Callable[[Any], bool]


def _is_type(kind: str) -> Check | None:
    # Conservative: an integer is a true int (1.0 counts in some drafts, not in draft 4).
    checks: dict[str, Check] = {
        "string": lambda v: type(v) is str,
        "integer": lambda v: type(v) is int,
        "number": lambda v: type(v) in (int, float),
        "boolean": lambda v: type(v) is bool,
        "object": lambda v: type(v) is dict,
        "array": lambda v: type(v) is list,
        "null": lambda v: v is None,
    }
    return checks.get(kind)


def _quick(schema: Any) -> Check | None:
    """A check that returns True only for instances ``schema`` accepts (False: unsure), or
    None when ``schema`` uses anything beyond the plain subset."""
    if schema is True or schema == {}:
        return lambda v: True
    if not isinstance(schema, dict):
        return None
    for key in schema:
        if key not in _QUICK_KEYS and key not in _ANNOTATIONS and not key.startswith("x-"):
            return None
    parts: list[Check] = []
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not kinds or not all(isinstance(k, str) for k in kinds):
            return None
        tests = [_is_type(k) for k in kinds]
        if any(t is None for t in tests):
            return None
        alternatives = [t for t in tests if t is not None]
        parts.append(lambda v: any(t(v) for t in alternatives))
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(required, list) or not isinstance(extra, bool):
        return None
    if not all(isinstance(r, str) for r in required):
        return None
    subs: dict[str, Check] = {}
    for name, sub in properties.items():
        check = _quick(sub)
        if check is None:
            return None
        subs[name] = check
    if subs or required or not extra:

        def members(v: Any) -> bool:
            if type(v) is not dict:
                return True  # these keywords only constrain objects
            if any(r not in v for r in required):
                return False
            for key, value in v.items():
                check = subs.get(key)
                if check is None:
                    if not extra:
                        return False
                elif not check(value):
                    return False
            return True

        parts.append(members)
    if "items" in schema:
        item = _quick(schema["items"])
        if item is None:
            return None
        parts.append(lambda v: type(v) is not list or all(item(x) for x in v))
    return lambda v: all(p(v) for p in parts)


@functools.lru_cache(maxsize=4096)
def _quick_for(schema_json: bytes) -> Check | None:
    try:
        return _quick(orjson.loads(schema_json))
    except RecursionError:  # a pathologically deep schema: jsonschema's to judge
        return None


def validate_arguments(schema: dict[str, Any], arguments: dict[str, Any]) -> None:
    """Raise ArgumentsInvalid (field = JSON pointer; data.errors every error, bounded) when
    ``arguments`` break ``schema``."""
    text = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    quick = _quick_for(text)
    try:
        if quick is not None and quick(arguments):
            return
    except RecursionError:
        pass  # deep enough to exhaust the stack: jsonschema decides (and refuses cleanly)
    try:
        # Bounded: a thousand bad items are counted, not a million (errors are lazy).
        errors = list(itertools.islice(_validator(text).iter_errors(arguments), MAX_COUNTED + 1))
    except (RecursionError, jsonschema.exceptions.SchemaError, LookupError, ValueError):
        # An unresolvable $ref or a pathological schema: refuse the call, do not crash.
        raise ArgumentsInvalid(
            "arguments could not be checked against the tool's schema", field="/"
        ) from None
    if not errors:
        return
    message, pointer, data = describe(errors)
    raise ArgumentsInvalid(message, field=pointer, data=data)
