"""Bytes → an OpenAPI/Swagger document (a dict), or ImportFailed saying what is wrong.

Pure: the caller fetched the bytes. JSON is tried first (orjson is ~50x faster than a
YAML parser and most big specs are JSON); anything else is parsed as YAML with a safe
loader that cannot construct Python objects and leaves dates as strings, so the result
stays JSON-able.
"""

from __future__ import annotations

from typing import Any

import orjson
import yaml

from appliance.errors import ImportFailed

_BOM = b"\xef\xbb\xbf"
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _SpecLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    """Safe YAML without the timestamp resolver: ``2024-01-01`` stays a string."""


_SpecLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}


def parse_document(data: bytes, *, source: str, max_bytes: int) -> dict[str, Any]:
    """Parse a JSON or YAML OpenAPI 3.x / Swagger 2.0 document.

    Raises ImportFailed (``field="document"``) when the bytes are too many, not UTF-8,
    neither JSON nor YAML (with the line), not a mapping, or not a known spec version.
    """
    where = f" ({source})" if source else ""
    if len(data) > max_bytes:
        raise ImportFailed(
            f"document{where} is {len(data)} bytes; the limit is {max_bytes}", field="document"
        )
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportFailed(
            f"document{where} is not UTF-8 (bad byte at offset {exc.start})", field="document"
        ) from None
    doc = _parse_text(data, text, where)
    if not isinstance(doc, dict):
        raise ImportFailed(
            f"document{where} must be a mapping at the top level, not {_kind(doc)}", field="document"
        )
    spec_version(doc)
    return doc


def spec_version(doc: dict[str, Any]) -> str:
    """``"2.0"`` or the ``openapi`` string (``"3.0.1"``, ``"3.1.0"``); else ImportFailed."""
    swagger = doc.get("swagger")
    if swagger is not None:
        # An unquoted YAML ``swagger: 2.0`` arrives as the float 2.0.
        if str(swagger) == "2.0":
            return "2.0"
        raise ImportFailed(f"unsupported swagger version {swagger!r}; only '2.0'", field="/swagger")
    openapi = doc.get("openapi")
    if openapi is not None:
        if isinstance(openapi, str | float) and str(openapi).startswith("3."):
            return str(openapi)
        raise ImportFailed(f"unsupported openapi version {openapi!r}; only 3.x", field="/openapi")
    raise ImportFailed(
        "not an OpenAPI document: neither 'openapi: 3.x' nor 'swagger: \"2.0\"' at the top level",
        field="/openapi",
    )


def _parse_text(data: bytes, text: str, where: str) -> Any:
    json_error: orjson.JSONDecodeError | None = None
    if text.lstrip()[:1] in ("{", "["):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            json_error = exc  # may still be YAML flow style; report the JSON error if not
    try:
        return yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        if json_error is not None:
            raise ImportFailed(
                f"document{where} is not valid JSON: {json_error.msg} at line {json_error.lineno}, "
                f"column {json_error.colno}",
                field="document",
            ) from None
        mark = exc.problem_mark or exc.context_mark
        line = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ImportFailed(
            f"document{where} is neither JSON nor YAML: {exc.problem or exc.context}{line}",
            field="document",
        ) from None
    except (yaml.YAMLError, RecursionError, ValueError, TypeError) as exc:
        # Constructor errors (bad !!binary, unhashable keys) and absurd nesting.
        raise ImportFailed(f"document{where} could not be read as YAML: {exc}", field="document") from None


def _kind(value: Any) -> str:
    if value is None:
        return "an empty document"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"
