"""JSON Schema from example values (pure): every value observed once, then one schema.

A ``Shape`` accumulates what the examples showed at one place (a body, a field, an array's
items): the JSON kinds seen and the first entry that showed each, string formats, a few
distinct values (for enums), how often each object field was present. ``schema()`` turns
it into JSON Schema: types (integer widened to number, null as a nullable type), formats
(date-time, date, email, uuid, uri), enums where few values repeat across enough examples,
``required`` for fields present in every object, nested objects and arrays. Two kinds that
cannot be one type (a string here, an object there) are a ``Conflict`` naming both entries.
Work is linear in the values observed; nesting deeper than ``MAX_DEPTH`` and fields past
``MAX_FIELDS`` of one object are left open.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 12
MAX_FIELDS = 200  # per object: a schema stays readable (and small) whatever a body holds
ENUM_MIN_SAMPLES = 4  # an enum needs values seen at least this often in all...
ENUM_MAX_VALUES = 6  # ...no more distinct values than this...
ENUM_MAX_LENGTH = 40  # ...each short, like a status or a colour, not free text
_DISTINCT_KEPT = ENUM_MAX_VALUES + 1
_FORMAT_TEXT_MAX = 256
_FORMATS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("uuid", re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")),
    (
        "date-time",
        re.compile(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d(?::\d\d(?:\.\d{1,9})?)?(?:[Zz]|[+-]\d\d:?\d\d)?"),
    ),
    ("date", re.compile(r"\d{4}-\d\d-\d\d")),
    ("email", re.compile(r"[^@\s]{1,64}@[^@\s.]+(?:\.[^@\s.]+)+")),
    ("uri", re.compile(r"https?://[^\s]+")),
)
# A field named like a credential never lists its values (a password sent in every example
# would otherwise repeat enough to look like an enum).
_SECRETIVE = re.compile(r"pass|secret|token|key|auth|credential|session|otp|pin", re.IGNORECASE)
_INTEGER = re.compile(r"-?(?:0|[1-9]\d{0,17})")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")


@dataclass(frozen=True)
class Conflict:
    where: str  # "body.items[].price"
    kinds: dict[str, str]  # kind → the first entry that showed it

    def message(self) -> str:
        seen = ", ".join(f"{kind} in {entry}" for kind, entry in self.kinds.items())
        return f"{self.where} has conflicting shapes: {seen}"


class ShapeConflict(Exception):
    def __init__(self, conflict: Conflict) -> None:
        super().__init__(conflict.message())
        self.conflict = conflict


def string_format(text: str) -> str | None:
    if len(text) > _FORMAT_TEXT_MAX:
        return None
    return next((name for name, pattern in _FORMATS if pattern.fullmatch(text)), None)


def text_value(text: str) -> Any:
    """A query value or path segment read as the JSON value it most likely stands for."""
    if _INTEGER.fullmatch(text) and not (len(text) > 1 and text.lstrip("-").startswith("0")):
        return int(text)
    if _NUMBER.fullmatch(text):
        return float(text)
    if text in ("true", "false"):
        return text == "true"
    return text


@dataclass
class Shape:
    kinds: dict[str, str] = field(default_factory=dict)  # kind → first entry
    nulls: int = 0
    strings: int = 0
    formats: set[str | None] = field(default_factory=set)
    values: dict[str, int] = field(default_factory=dict)  # at most _DISTINCT_KEPT distinct
    many_values: bool = False
    longest: int = 0
    objects: int = 0
    fields: dict[str, Shape] = field(default_factory=dict)
    present: dict[str, int] = field(default_factory=dict)
    items: Shape | None = None
    open: bool = False  # deeper than MAX_DEPTH: any value

    def observe(self, value: Any, where: str, depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            self.open = True
            return
        if value is None:
            self.nulls += 1
            return
        kind = _kind(value)
        self.kinds.setdefault(kind, where)
        if kind == "string":
            self._string(value)
        elif kind == "object":
            self.objects += 1
            for key, item in value.items():
                name = str(key)
                if name not in self.fields and len(self.fields) >= MAX_FIELDS:
                    continue  # an object of thousands of keys is a map: the rest stays open
                self.present[name] = self.present.get(name, 0) + 1
                self.fields.setdefault(name, Shape()).observe(item, where, depth + 1)
        elif kind == "array":
            if self.items is None:
                self.items = Shape()
            for item in value:
                self.items.observe(item, where, depth + 1)

    def _string(self, value: str) -> None:
        self.strings += 1
        self.formats.add(string_format(value))
        self.longest = max(self.longest, len(value))
        if value in self.values:
            self.values[value] += 1
        elif len(self.values) < _DISTINCT_KEPT:
            self.values[value] = 1
        else:
            self.many_values = True

    def schema(
        self,
        where: str,
        *,
        lenient: bool = False,
        conflicts: list[Conflict] | None = None,
        secretive: bool = False,
    ) -> dict[str, Any]:
        """JSON Schema for what was seen. Kinds that cannot be one type are a string when
        ``lenient`` (text), else added to ``conflicts`` (every one of them, the place left
        open) or, without that list, ShapeConflict."""
        if self.open:
            return {}
        kinds = set(self.kinds)
        if kinds >= {"integer", "number"} or kinds == {"number"}:
            kinds = (kinds - {"integer"}) | {"number"}
        if len(kinds) > 1:
            if not lenient:
                conflict = Conflict(where, dict(self.kinds))
                if conflicts is None:
                    raise ShapeConflict(conflict)
                conflicts.append(conflict)
                return {}
            kinds = {"string"}
        if not kinds:
            return {}
        kind = kinds.pop()
        out: dict[str, Any] = {"type": [kind, "null"] if self.nulls else kind}
        if kind == "object":
            out["properties"] = {
                name: shape.schema(
                    f"{where}.{name}",
                    lenient=lenient,
                    conflicts=conflicts,
                    secretive=_SECRETIVE.search(name) is not None,
                )
                for name, shape in self.fields.items()
            }
            required = [name for name, count in self.present.items() if count == self.objects]
            if required:
                out["required"] = required
        elif kind == "array":
            items = self.items
            out["items"] = items.schema(f"{where}[]", lenient=lenient, conflicts=conflicts) if items else {}
        elif kind == "string":
            self._string_keywords(out, enum=not secretive)
        return out

    def _string_keywords(self, out: dict[str, Any], *, enum: bool) -> None:
        if len(self.formats) == 1 and None not in self.formats:
            out["format"] = next(iter(self.formats))
            return
        if (
            enum
            and not self.many_values
            and self.strings >= ENUM_MIN_SAMPLES
            and len(self.values) <= ENUM_MAX_VALUES
            and len(self.values) * 2 <= self.strings
            and self.longest <= ENUM_MAX_LENGTH
        ):
            out["enum"] = sorted(self.values)


# bool before int: True is an int to Python, a boolean to JSON.
_KINDS: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (dict, "object"),
    (list, "array"),
)


def _kind(value: Any) -> str:
    return next((kind for cls, kind in _KINDS if isinstance(value, cls)), "string")
