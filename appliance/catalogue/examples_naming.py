"""Names and descriptions of inferred tools from a chat model: what is asked, what is kept (pure).

What the model is sent (``facts``) is the shape of each inferred tool and nothing the
examples held as a value: the method, the path template (identifier-like segments are
already parameters, ``examples_paths``), each parameter's name, place and JSON type, and the
body's schema reduced to types, formats, fields and ``required`` (no enum, default or example,
which are values). The credential the examples sent is not an input of any tool, so it is
not among them; the gateway redacts the facts once more before they leave.

What comes back is treated as hostile (``parse_answer``): the HTTP body and the message's
content are bounded, both are parsed strictly, every entry must answer an asked id, a name
must be a snake_case action that makes a valid tool name (``catalogue/naming.py``), and a
description must be one short line that, once its invisible characters are removed, the
import screening (``catalogue/screening.py``) finds nothing in. Anything else is dropped
for that tool, with a note that never repeats the model's text; the tool keeps what the
examples gave it. ``apply`` puts the kept proposals on the drafts and keeps names unique.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from appliance.catalogue.naming import MAX_NAME, SEPARATOR
from appliance.catalogue.screening import screen_tool, visible
from appliance.models import ToolDraft

BATCH = 20  # tools asked about in one request
NAME_MAX = 48  # characters of the action the model proposes (before the slug's prefix)
DESCRIPTION_MAX = 240  # characters of the model's sentence
ANSWER_MAX_BYTES = 16_384 + 1_024 * BATCH  # the HTTP body; past it the answer is not read
FIELDS_MAX = 60  # body fields described, per object
DEPTH_MAX = 6  # body nesting described
NODES_MAX = 200  # body fields and items described in all, per tool (a prompt stays small)
LABEL_MAX = 80  # characters of a parameter or field name sent
_TYPES = frozenset({"string", "integer", "number", "boolean", "object", "array", "null"})
_FORMATS = frozenset({"date-time", "date", "email", "uuid", "uri"})
# Unambiguous (a run never holds the "_" that ends it): linear, and applied to 48 characters at most.
_SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
FENCE = "```"

SYSTEM = (
    "You name HTTP API endpoints as tools for an AI agent. For each endpoint in the user's JSON, "
    "give a name: snake_case (lower-case letters, digits, single underscores, starting with a "
    "letter), a verb then a noun such as list_notes or get_note, at most {name_max} characters; "
    "and a description: one plain sentence of at most {description_max} characters saying what "
    "the endpoint does, judged from its method, path, parameters and body fields only. Do not "
    "address the reader and give no instructions. Answer with only a JSON object of the form "
    '{{"tools": [{{"id": "<the endpoint\'s id>", "name": "...", "description": "..."}}]}}, one '
    "entry per endpoint."
)


class NamingFailed(Exception):
    """The whole answer is unusable; ``reason`` says why without quoting it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Proposal:
    action: str | None  # the snake_case action kept, or None
    description: str | None  # the sentence kept, or None


@dataclass
class Answer:
    proposals: dict[str, Proposal]  # by asked id
    notes: list[str] = field(default_factory=list)


# --- what is sent -----------------------------------------------------------------------------


def facts(tool: ToolDraft, ident: str) -> dict[str, Any]:
    """The shape of one inferred tool, holding no value from the examples."""
    binding = tool.binding or {}
    props = tool.input_schema.get("properties") or {}
    required = set(tool.input_schema.get("required") or [])
    out: dict[str, Any] = {
        "id": ident,
        "method": str(binding.get("method", "")),
        "path": str(binding.get("path", "")),
        "current_name": tool.name.partition(SEPARATOR)[2] or tool.name,
    }
    params = [
        {
            "name": _label(p.get("name")),
            "in": str(p.get("location", "")),
            **_type_of(props.get(p.get("arg"))),
            "required": p.get("arg") in required,
        }
        for p in binding.get("params") or []
        if isinstance(p, dict)
    ]
    names = binding.get("body_field_names") or {}
    params += [
        {"name": _label(names.get(a, a)), "in": "form", **_type_of(props.get(a)), "required": a in required}
        for a in binding.get("body_fields") or []
    ]
    if params:
        out["parameters"] = params
    body_arg = binding.get("body_arg")
    if body_arg:
        out["body"] = {
            "media_type": str(binding.get("body_media_type") or ""),
            "schema": shape(props.get(body_arg)),
        }
    return out


def _label(value: Any) -> str:
    return str(value or "")[:LABEL_MAX]


def _type_of(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, dict):
        return {}
    out: dict[str, Any] = {}
    kind = _kind(schema.get("type"))
    if kind is not None:
        out["type"] = kind
    if schema.get("format") in _FORMATS:
        out["format"] = schema["format"]
    items = schema.get("items")
    if isinstance(items, dict) and _kind(items.get("type")) is not None:
        out["items"] = _kind(items.get("type"))
    return out


def _kind(value: Any) -> str | list[str] | None:
    if isinstance(value, str):
        return value if value in _TYPES else None
    if isinstance(value, list):
        kinds = [v for v in value if isinstance(v, str) and v in _TYPES]
        return kinds or None
    return None


def shape(schema: Any, depth: int = 0, budget: list[int] | None = None) -> dict[str, Any]:
    """A JSON Schema reduced to its structure: types, formats, fields, items and ``required``
    (never ``enum``, ``const``, ``default`` or ``examples``: those are values). At most
    ``FIELDS_MAX`` fields an object, ``DEPTH_MAX`` levels and ``NODES_MAX`` nodes in all;
    past them a node is left open (``{}``)."""
    budget = [NODES_MAX] if budget is None else budget
    if not isinstance(schema, dict) or depth > DEPTH_MAX or budget[0] <= 0:
        return {}
    budget[0] -= 1
    out = _type_of({k: v for k, v in schema.items() if k != "items"})
    props = schema.get("properties")
    if isinstance(props, dict):
        kept = dict(list(props.items())[:FIELDS_MAX])
        out["properties"] = {_label(k): shape(v, depth + 1, budget) for k, v in kept.items()}
        required = [_label(r) for r in schema.get("required") or [] if isinstance(r, str) and r in kept]
        if required:
            out["required"] = required
    items = schema.get("items")
    if isinstance(items, dict):
        out["items"] = shape(items, depth + 1, budget)
    return out


def messages(endpoints: Sequence[Mapping[str, Any]], slug: str) -> list[dict[str, str]]:
    """The chat messages for one batch (``endpoints``: ``facts`` of each tool, redacted)."""
    action_max = action_limit(slug)
    system = SYSTEM.format(name_max=action_max, description_max=DESCRIPTION_MAX)
    user = orjson.dumps({"endpoints": list(endpoints)}).decode()
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def action_limit(slug: str) -> int:
    """The longest action that still makes a tool name of at most ``MAX_NAME`` characters."""
    return min(NAME_MAX, MAX_NAME - len(slug) - len(SEPARATOR))


# --- what is kept -----------------------------------------------------------------------------


def parse_answer(raw: bytes, asked: Mapping[str, str], slug: str) -> Answer:
    """The proposals an OpenAI-compatible chat completion makes for the ``asked`` ids
    (id → the tool's current name, for the notes). NamingFailed for an unusable whole."""
    if len(raw) > ANSWER_MAX_BYTES:
        raise NamingFailed(f"the answer is over {ANSWER_MAX_BYTES} bytes")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise NamingFailed("the answer is not JSON") from None
    content = _unfenced(_content(doc))
    try:
        inner = orjson.loads(content)
    except orjson.JSONDecodeError:
        raise NamingFailed("the model's message is not a JSON object") from None
    entries = inner.get("tools") if isinstance(inner, dict) else None
    if not isinstance(entries, list):
        raise NamingFailed('the model\'s message has no "tools" list')
    if len(entries) > 2 * len(asked):
        raise NamingFailed(f"the model answered {len(entries)} entries for {len(asked)} tools")
    answer = Answer({})
    ids = Counter(e.get("id") for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str))
    for entry in entries:
        ident = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(ident, str) or ident not in asked:
            continue
        tool = asked[ident]
        if ids[ident] > 1:
            if ident not in answer.proposals:
                answer.notes.append(f"the model answered {tool} more than once: kept its own name")
                answer.proposals[ident] = Proposal(None, None)
            continue
        assert isinstance(entry, dict)
        name = _action(entry.get("name"), slug)
        if name is None and "name" in entry:
            answer.notes.append(
                f"the model's name for {tool} is not a snake_case action of at most "
                f"{action_limit(slug)} characters: kept {tool}"
            )
        text, why = _sentence(entry.get("description"), f"{slug}{SEPARATOR}{name or 'tool'}")
        if why is not None:
            answer.notes.append(f"the model's description of {tool} {why}: kept the one from the examples")
        answer.proposals[ident] = Proposal(name, text)
    missing = [asked[i] for i in asked if i not in answer.proposals]
    if missing:
        answer.notes.append(f"the model did not answer for {', '.join(missing[:10])}")
    return answer


def _content(doc: Any) -> str:
    try:
        content = doc["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise NamingFailed("the answer is not a chat completion (no choices[0].message.content)") from None
    if not isinstance(content, str):
        raise NamingFailed("the model's message is not text")
    return content


def _unfenced(content: str) -> str:
    """The text inside one surrounding code fence (```` ``` ```` or ```` ```json ````), if any:
    models wrap JSON so even in JSON mode. Slicing, not a pattern: no backtracking on 36 KiB."""
    text = content.strip()
    if not (text.startswith(FENCE) and text.endswith(FENCE) and len(text) > 2 * len(FENCE)):
        return content
    opener, newline, rest = text.partition("\n")
    if not newline or opener[len(FENCE) :].strip() not in ("", "json"):
        return content
    return rest[: -len(FENCE)]


def _action(value: Any, slug: str) -> str | None:
    if not isinstance(value, str) or len(value) > action_limit(slug) or not _SNAKE.fullmatch(value):
        return None
    return value


def _sentence(value: Any, name: str) -> tuple[str | None, str | None]:
    """The description kept (or None) and why it was not (or None)."""
    if value is None:
        return None, None
    if not isinstance(value, str):
        return None, "is not text"
    text = " ".join(visible(value).split())
    if not text:
        return None, "is empty"
    if len(text) > DESCRIPTION_MAX:
        return None, f"is longer than {DESCRIPTION_MAX} characters"
    found = screen_tool(name, "", text, {})
    if found:
        kinds = ", ".join(sorted({f.category for f in found}))
        return None, f"was flagged by screening ({kinds})"
    return text, None


@dataclass
class Applied:
    tools: list[ToolDraft]
    renamed: dict[str, str]  # the examples' name → the model's
    origins: dict[str, dict[str, str]]  # final name → {"name": "model"|"examples", "description": ...}
    notes: list[str]


def apply(tools: Sequence[ToolDraft], slug: str, proposals: Mapping[str, Proposal]) -> Applied:
    """``tools`` with the kept proposals (by the tool's current name): a model's name that
    would clash with another tool's is dropped, so names stay unique whatever it answered.
    A kept sentence leads the description; what the examples showed follows it."""
    final = {t.name: _full(slug, proposals.get(t.name)) or t.name for t in tools}
    notes: list[str] = []
    while True:
        counts = Counter(final.values())
        clashing = [own for own, name in final.items() if counts[name] > 1 and name != own]
        if not clashing:
            break
        for own in clashing:
            notes.append(f"the model's name for {own} is another tool's too: kept {own}")
            final[own] = own
    out: list[ToolDraft] = []
    origins: dict[str, dict[str, str]] = {}
    for t in tools:
        p = proposals.get(t.name) or Proposal(None, None)
        name = final[t.name]
        description = f"{p.description} {t.description}" if p.description else t.description
        out.append(replace(t, name=name, description=description))
        origins[name] = {
            "name": "model" if name != t.name else "examples",
            "description": "model" if p.description else "examples",
        }
    renamed = {own: name for own, name in final.items() if name != own}
    return Applied(out, renamed, origins, notes)


def _full(slug: str, p: Proposal | None) -> str | None:
    return f"{slug}{SEPARATOR}{p.action}" if p is not None and p.action else None
