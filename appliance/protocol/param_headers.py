"""SEP-2243 ``x-mcp-header``: tool parameters mirrored into ``Mcp-Param-{name}`` HTTP headers.

Pure functions, used on both sides of the gateway (2026-07-28 streamable HTTP only):

- as a client of an upstream, ``headers_for`` builds the headers a ``tools/call`` must carry;
- as a server, ``mismatch`` checks the headers a client sent against the call's arguments
  (the caller answers a problem with 400 ``HeaderMismatch``).

Rules, from streamable-http.mdx "Custom Headers from Tool Parameters": the annotation names
an HTTP token, unique case-insensitively within the schema, on a ``string``, ``integer`` or
``boolean`` property reachable from the root through ``properties`` keys only (an annotation
anywhere else makes the whole tool definition invalid). A value is sent as is when it is
plain visible ASCII without surrounding whitespace, else as ``=?base64?…?=`` (UTF-8); an
absent or null argument sends no header. A server compares after decoding; integers
numerically.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

KEY = "x-mcp-header"
PREFIX = "mcp-param-"
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_PLAIN = re.compile(r"[\x20-\x7e]*")
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e]*")
_HEAD, _TAIL = "=?base64?", "?="
_TYPES = ("string", "integer", "boolean")
_SAFE_INT = 2**53 - 1

Path = tuple[str, ...]


class InvalidAnnotation(ValueError):
    """A tool whose ``x-mcp-header`` annotations break the rules (clients must drop the tool)."""


def annotated_params(schema: Any) -> dict[Path, str]:
    """Property path → header name part, for every annotation; raises InvalidAnnotation."""
    found: list[tuple[Path | None, Any, Any]] = []
    _walk(schema, (), True, found)
    out: dict[Path, str] = {}
    seen: set[str] = set()
    for path, token, node in found:
        where = "/".join(path or ()) or "the schema root"
        if path is None or not path:
            raise InvalidAnnotation(f"{KEY} is only allowed on a property reached through 'properties'")
        if not isinstance(token, str) or not _TOKEN.fullmatch(token):
            raise InvalidAnnotation(f"{KEY} of {where} is not an HTTP header token")
        if token.lower() in seen:
            raise InvalidAnnotation(f"{KEY} {token!r} appears twice (names are case-insensitive)")
        if node.get("type") not in _TYPES:
            raise InvalidAnnotation(
                f"{KEY} of {where} is on a property that is not a string, integer or boolean"
            )
        seen.add(token.lower())
        out[path] = token
    return out


def _walk(node: Any, path: Path, static: bool, found: list[tuple[Path | None, Any, Any]]) -> None:
    if isinstance(node, list):
        for item in node:
            _walk(item, path, False, found)
        return
    if not isinstance(node, dict):
        return
    if KEY in node:
        found.append((path if static else None, node[KEY], node))
    for key, value in node.items():
        if key == "properties" and isinstance(value, dict):
            for name, sub in value.items():
                _walk(sub, (*path, str(name)), static, found)
        elif key != KEY:
            _walk(value, path, False, found)  # items, anyOf, $defs, ...: not statically reachable


def _value_at(arguments: Mapping[str, Any], path: Path) -> Any:
    node: Any = arguments
    for step in path:
        if not isinstance(node, Mapping) or step not in node:
            return None
        node = node[step]
    return node


def _text(value: Any) -> str | None:
    """A primitive argument as header text (None: not a primitive the rules allow)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and abs(value) <= _SAFE_INT:
        return str(value)
    if isinstance(value, float) and value.is_integer() and abs(value) <= _SAFE_INT:
        return str(int(value))
    return value if isinstance(value, str) else None


def encode(text: str) -> str:
    """A header value: as is when plain, else the base64 sentinel form."""
    plain = (
        _PLAIN.fullmatch(text)
        and text == text.strip(" \t")
        and not (text.startswith(_HEAD) and text.endswith(_TAIL))
    )
    return text if plain else f"{_HEAD}{base64.b64encode(text.encode()).decode()}{_TAIL}"


def decode(value: str) -> str | None:
    """A received header value, sentinel decoded (None: malformed base64 or bad characters)."""
    if value.startswith(_HEAD) and value.endswith(_TAIL) and len(value) >= len(_HEAD) + len(_TAIL):
        try:
            return base64.b64decode(value[len(_HEAD) : -len(_TAIL)], validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
    return value if _FIELD_VALUE.fullmatch(value) else None


_REMEMBERED: OrderedDict[int, tuple[Any, dict[Path, str] | None]] = OrderedDict()
_REMEMBER_MAX = 1024


def _annotated_valid(schema: Any) -> dict[Path, str] | None:
    """``annotated_params`` of a catalogue tool's schema, None when invalid; remembered.

    Every call walks its tool's whole input schema twice (the check of a toolkit endpoint's
    headers, then the headers sent upstream), and a tool's schema object is shared and never
    changed: the catalogue's memo hands out the same ``Tool`` until the database changes. So
    the walk is remembered by object identity; the entry holds the schema itself, so its id
    cannot be reused by another object while remembered. Callers must not change the result.
    """
    key = id(schema)
    hit = _REMEMBERED.get(key)
    if hit is not None and hit[0] is schema:
        _REMEMBERED.move_to_end(key)
        return hit[1]
    try:
        found: dict[Path, str] | None = annotated_params(schema)
    except InvalidAnnotation:
        found = None
    _REMEMBERED[key] = (schema, found)
    if len(_REMEMBERED) > _REMEMBER_MAX:
        _REMEMBERED.popitem(last=False)
    return found


def headers_for(schema: Any, arguments: Mapping[str, Any]) -> dict[str, str]:
    """The ``Mcp-Param-*`` headers a call with ``arguments`` carries ({} for an invalid schema)."""
    annotated = _annotated_valid(schema)
    if not annotated:
        return {}
    out = {}
    for path, token in annotated.items():
        text = _text(_value_at(arguments, path))
        if text is not None:
            out[f"Mcp-Param-{token}"] = encode(text)
    return out


def _agrees(header: str, value: Any) -> bool:
    if isinstance(value, bool):
        return header == ("true" if value else "false")
    if isinstance(value, int | float):
        try:
            return float(header) == float(value)  # numerically: "42.0" matches 42
        except ValueError:
            return False
    return isinstance(value, str) and header == value


def mismatch(schema: Any, arguments: Mapping[str, Any], headers: Mapping[str, list[str]]) -> str | None:
    """Why the ``Mcp-Param-*`` headers disagree with ``arguments`` (None: they agree).

    ``headers``: lower-case header names to every value received. A schema with invalid
    annotations has no recognised headers. Headers no annotation names are ignored.
    """
    annotated = _annotated_valid(schema)
    if not annotated:
        return None
    for path, token in annotated.items():
        name = f"Mcp-Param-{token}"
        received = headers.get(PREFIX + token.lower(), [])
        value = _value_at(arguments, path)
        if len(received) > 1:
            return f"the {name} header appears more than once"
        if value is None:
            if received:
                return f"the {name} header is set but arguments.{'.'.join(path)} is absent"
            continue
        if not received:
            return f"the {name} header is missing; arguments.{'.'.join(path)} has a value"
        decoded = decode(received[0].strip(" \t"))
        if decoded is None:
            return f"the {name} header has invalid characters or malformed base64"
        if not _agrees(decoded, value):
            return f"the {name} header does not match arguments.{'.'.join(path)}"
    return None
