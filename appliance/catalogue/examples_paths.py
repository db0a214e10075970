"""Path templates and tool names from example paths (pure).

A segment that looks like an identifier (a number, a UUID, a hex hash, a long token of
letters and digits, a date) is a path parameter even in a single example. A literal
segment that varies is one too when at least ``MERGE_MIN_VARIANTS`` otherwise identical
paths vary only there and every variant answered with the same response fields (users
``alice``, ``bob``, ``carol``): without that evidence ``/api/users`` and ``/api/orders``
stay two endpoints. Parameters are named after the collection before them (``notes/7`` →
``note_id``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from appliance.catalogue.examples_schema import string_format

MERGE_MIN_VARIANTS = 3
PARAM = None  # a template segment that is a parameter
_HEX = re.compile(r"[0-9a-fA-F]{8,}")
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,}")
_DIGITS = re.compile(r"\d+")
_WORD = re.compile(r"[^A-Za-z0-9]+")
_VERSION = re.compile(r"v\d+(?:\.\d+)?|api|rest")

Template = tuple[str | None, ...]  # literal segments (decoded) or PARAM


def segments(path: str) -> list[str]:
    """The decoded segments of ``/a/b%20c`` (a trailing slash keeps an empty last one)."""
    return [unquote(s) for s in path.split("/")[1:]]


def id_like(segment: str) -> bool:
    if _DIGITS.fullmatch(segment):
        return True
    if string_format(segment) in ("uuid", "date", "date-time", "email"):
        return True
    if _HEX.fullmatch(segment) and any(c.isdigit() for c in segment):
        return True
    return bool(
        _TOKEN.fullmatch(segment) and any(c.isdigit() for c in segment) and any(c.isalpha() for c in segment)
    )


def template_of(parts: Sequence[str]) -> Template:
    return tuple(PARAM if id_like(s) else s for s in parts)


def merge_varying(templates: dict[Template, frozenset[str] | None]) -> dict[Template, Template]:
    """Which templates fold into one with a parameter where they vary.

    ``templates`` maps each template to the response fields its examples answered with
    (None: no JSON object seen). Returns template → the merged template, for those merged.
    """
    merged: dict[Template, Template] = {}
    for length in {len(t) for t in templates}:
        same = [t for t in templates if len(t) == length and t not in merged]
        for position in range(1, length):  # the first segment names the API, never a value
            buckets: dict[Template, list[Template]] = defaultdict(list)
            for t in same:
                if t[position] is not PARAM and t not in merged:
                    buckets[(*t[:position], PARAM, *t[position + 1 :])].append(t)
            for target, group in buckets.items():
                fields = {templates[t] for t in group}
                if len(group) >= MERGE_MIN_VARIANTS and len(fields) == 1 and next(iter(fields)):
                    for t in group:
                        merged[t] = target
    return merged


def param_names(template: Template) -> list[str]:
    """A name for each parameter of ``template``, in order: ``note_id``, else ``id``, unique."""
    names: list[str] = []
    for i, seg in enumerate(template):
        if seg is not PARAM:
            continue
        before = template[i - 1] if i > 0 else None
        stem = _WORD.sub("_", singular(before)).strip("_").lower() if before else ""
        base = f"{stem}_id" if stem else "id"
        name, n = base, 2
        while name in names:
            name, n = f"{base}_{n}", n + 1
        names.append(name)
    return names


def render(template: Template, names: Sequence[str]) -> str:
    it = iter(names)
    return "/" + "/".join(f"{{{next(it)}}}" if s is PARAM else s for s in template)


def singular(word: str | None) -> str:
    if not word:
        return ""
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def action(method: str, template: Template) -> str:
    """``list_notes``, ``get_note``, ``create_note``, ``update_note``, ``delete_note``…"""
    words = [s for s in template if s is not PARAM and s and not _VERSION.fullmatch(s.lower())]
    on_item = bool(template) and template[-1] is PARAM
    verb = {
        "GET": "get" if on_item else "list",
        "POST": "create" if not on_item else "post",
        "PUT": "update" if on_item else "put",
        "PATCH": "update" if on_item else "patch",
        "DELETE": "delete",
        "HEAD": "check",
    }.get(method, method.lower())
    if not words:
        return f"{verb}_root"
    nouns = [singular(w) for w in words[:-1]]
    last = words[-1]
    nouns.append(last if verb in ("list",) else singular(last))
    return "_".join([verb, *(_WORD.sub("_", n).strip("_") for n in nouns if n)])


@dataclass(frozen=True)
class Route:
    method: str
    template: Template
    names: tuple[str, ...]

    @property
    def path(self) -> str:
        return render(self.template, self.names)

    @property
    def label(self) -> str:
        return f"{self.method} {self.path}"
