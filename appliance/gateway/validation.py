"""Tool arguments checked against the tool's input schema before anything leaves.

The error names the JSON pointer of the offending value (``/body/name``) or, for a
missing property, the pointer where it should be (``/petId``), so an agent can fix the
call. Validators are compiled once per schema text and cached.
"""

from __future__ import annotations

import functools
from typing import Any

import jsonschema
import orjson
from jsonschema.exceptions import ValidationError

from appliance.errors import ArgumentsInvalid


def _pointer(parts: Any) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


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
    return cls(schema)


def _describe(err: ValidationError) -> tuple[str, str]:
    path = list(err.absolute_path)
    required: Any = err.validator_value
    if err.validator == "required" and isinstance(err.instance, dict) and isinstance(required, list):
        missing = next((p for p in required if p not in err.instance), None)
        if missing is not None:
            pointer = _pointer([*path, missing])
            return pointer, f"missing required property {missing!r} at {pointer}"
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        schema: Any = err.schema
        allowed = set((schema.get("properties") or {}).keys()) if isinstance(schema, dict) else set()
        extra = sorted(k for k in err.instance if k not in allowed)
        if extra:
            pointer = _pointer([*path, extra[0]])
            return pointer, f"unexpected property {extra[0]!r} at {pointer}"
    pointer = _pointer(path) or "/"
    message = err.message
    if len(message) > 300:
        message = message[:300] + "…"
    return pointer, f"invalid value at {pointer}: {message}"


def validate_arguments(schema: dict[str, Any], arguments: dict[str, Any]) -> None:
    """Raise ArgumentsInvalid (field = JSON pointer) when ``arguments`` break ``schema``."""
    validator = _validator(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))
    try:
        errors = list(validator.iter_errors(arguments))
    except (RecursionError, jsonschema.exceptions.SchemaError, LookupError, ValueError):
        # An unresolvable $ref or a pathological schema: refuse the call, do not crash.
        raise ArgumentsInvalid(
            "arguments could not be checked against the tool's schema", field="/"
        ) from None
    if not errors:
        return
    best = jsonschema.exceptions.best_match(errors)
    assert best is not None
    pointer, message = _describe(best)
    raise ArgumentsInvalid(message, field=pointer, data={"path": pointer})
