"""Tool-description screening (pure): what in an upstream's tool text is aimed at the model.

A tool's name, title, description and schema go into an agent's context as they are, so an
upstream can write instructions there (tool poisoning). Every imported or re-synced tool is
screened for five kinds of finding:

- ``instruction``: text addressed to the model rather than describing the tool ("ignore
  previous instructions", "do not tell the user", ``<IMPORTANT>`` blocks, system-prompt talk);
- ``other_tools``: text that steers the use of other tools ("when calling X also ...",
  "before using any other tool", "instead of the ... tool");
- ``secrets``: requests to read or send secrets and private files (``~/.ssh``, ``id_rsa``,
  ``.env``, the master key, credentials, the conversation);
- ``invisible``: zero-width and other format characters, Unicode tag characters (which spell
  hidden ASCII), bidirectional overrides and isolates, control characters;
- ``imitation``: a name made of look-alike characters, or one that imitates another
  toolkit's tools (the same name in confusable spelling, another toolkit's prefix).

A finding holds a tool pending with its reasons; the owner decides. Everything here is
linear in the text's length: one pass to clean, one tokenising pattern without nested
repetition, and rules that look a bounded number of words ahead. ``visible`` removes the
invisible characters from any text before an agent sees it (the stored text stays as sent,
for the diff and the audit).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

Category = str  # instruction | other_tools | secrets | invisible | imitation
EVIDENCE_MAX = 120
# What one tool may contribute to the scan: a description of megabytes is screened on its
# first part and flagged for its size instead of costing seconds (imports cap it anyway).
SCAN_MAX = 200_000


@dataclass(frozen=True)
class Finding:
    category: Category
    reason: str
    evidence: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"category": self.category, "reason": self.reason, "evidence": self.evidence}


def findings_from(rows: Any) -> list[Finding]:
    """Stored findings (a list of dicts) back as ``Finding``s; anything else is none."""
    if not isinstance(rows, list):
        return []
    return [
        Finding(str(r.get("category", "")), str(r.get("reason", "")), str(r.get("evidence", "")))
        for r in rows
        if isinstance(r, dict)
    ]


# --- invisible characters -------------------------------------------------------------------

_TAGS = range(0xE0000, 0xE0080)
_BIDI = frozenset([0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])
_ZERO_WIDTH = frozenset(
    [
        *(0x00AD, 0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x3164, 0xFEFF, 0xFFA0),
        *range(0x180B, 0x180E),
        *range(0x200B, 0x200E),
        *range(0x2060, 0x2066),
        *range(0x206A, 0x2070),
        *range(0xFFF9, 0xFFFC),
        *range(0x1BCA0, 0x1BCA4),
        *range(0x1D173, 0x1D17B),
        *range(0xE0100, 0xE01F0),  # variation selectors 17-256: bytes smuggled after a glyph
    ]
)
# C0 and C1 controls but tab, line feed and carriage return (a terminal escape hides text too).
_CONTROLS = frozenset([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0)])
_INVISIBLE = frozenset([*_TAGS, *_BIDI, *_ZERO_WIDTH, *_CONTROLS])


def _char_class(codepoints: frozenset[int]) -> str:
    """``[...]`` of these code points as ranges (one class, no repetition: linear, in C)."""
    runs: list[tuple[int, int]] = []
    for cp in sorted(codepoints):
        if runs and runs[-1][1] == cp - 1:
            runs[-1] = (runs[-1][0], cp)
        else:
            runs.append((cp, cp))
    return "[" + "".join(f"\\U{a:08x}" + (f"-\\U{b:08x}" if b > a else "") for a, b in runs) + "]"


_INVISIBLE_CHAR = re.compile(_char_class(_INVISIBLE))


def visible(text: str) -> str:
    """``text`` without its invisible and control characters: what an agent is shown."""
    if not text or (text.isascii() and text.isprintable()):  # the common case, no copy
        return text
    if _INVISIBLE_CHAR.search(text) is None:
        return text
    return _INVISIBLE_CHAR.sub("", text)


def visible_json(raw: str | bytes | None) -> str | bytes | None:
    """A stored JSON document with the invisible characters removed from its text.

    They never appear in JSON's own syntax, and the store writes them unescaped, so removing
    them from the encoded document removes them from every string in it."""
    if raw is None:
        return None
    if isinstance(raw, bytes):
        if raw.isascii():
            return raw
        return visible(raw.decode("utf-8", "surrogatepass")).encode("utf-8", "surrogatepass")
    return visible(raw)


def reveal(text: str) -> str:
    """``text`` with each invisible or control character written as ``<U+XXXX>``: for a person
    reviewing it (a diff, a reason), who must see them, on a screen that must not obey them.
    Tab and line feed are kept; a carriage return is shown too."""
    if not text or (text.isascii() and text.isprintable()):
        return text
    return "".join(f"<{_codepoint(ord(c))}>" if ord(c) in _INVISIBLE or c == "\r" else c for c in text)


def _codepoint(cp: int) -> str:
    return f"U+{cp:04X}"


def _invisible(text: str) -> tuple[list[Finding], str]:
    """The invisible-character findings of ``text`` and the ASCII its tag characters spell."""
    if len(visible(text)) == len(text):  # one pass in C; the loop below only when needed
        return [], ""
    counts = {"tag": 0, "bidi": 0, "zero": 0, "control": 0}
    first: dict[str, int] = {}
    hidden: list[str] = []
    for ch in text:
        cp = ord(ch)
        if cp not in _INVISIBLE:
            continue
        kind = "tag" if cp in _TAGS else "bidi" if cp in _BIDI else "zero" if cp in _ZERO_WIDTH else "control"
        counts[kind] += 1
        first.setdefault(kind, cp)
        if kind == "tag" and 0x20 <= cp - 0xE0000 < 0x7F:
            hidden.append(chr(cp - 0xE0000))
    spelled = "".join(hidden)
    out = []
    if counts["tag"]:
        shown = spelled[:EVIDENCE_MAX] or _codepoint(first["tag"])
        out.append(Finding("invisible", f"{counts['tag']} Unicode tag characters (hidden text)", shown))
    if counts["bidi"]:
        out.append(
            Finding(
                "invisible",
                f"{counts['bidi']} bidirectional control characters (text shown out of order)",
                _codepoint(first["bidi"]),
            )
        )
    if counts["zero"]:
        out.append(
            Finding(
                "invisible", f"{counts['zero']} zero-width or invisible characters", _codepoint(first["zero"])
            )
        )
    if counts["control"]:
        out.append(
            Finding("invisible", f"{counts['control']} control characters", _codepoint(first["control"]))
        )
    return out, spelled


# --- words ----------------------------------------------------------------------------------

# Letters and digits that look like Latin ones (Cyrillic, Greek, Armenian, fullwidth forms are
# folded by NFKC first). Enough to read "ignore" spelled with
# Cyrillic i, o and e as "ignore", and to compare names.
_HOMOGLYPHS = str.maketrans(
    dict(
        zip(
            "аеорсухіјѕԁӏкмнтвԛԝαοερικντυχϲϳօսոհլ",
            "aeopcyxijsdlkmhtbqwaoepikntuxcjounhl",
            strict=True,
        )
    )
)
# One pattern, a single repeated class: no nesting, linear on any text.
_WORD = re.compile(r"[^\W_]+")


def _fold(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text).casefold()
    return folded if folded.isascii() else folded.translate(_HOMOGLYPHS)


def words(text: str) -> list[str]:
    return _WORD.findall(_fold(visible(text)))


Rule = tuple[tuple[frozenset[str], int], ...]  # each step: the words it accepts, how far ahead


def _rule(*steps: tuple[str, int]) -> Rule:
    return tuple((frozenset(w.split()), gap) for w, gap in steps)


_NOT = "not never dont don t without no"
_USER = "user users human humans person anyone operator"
_INSTRUCTION_RULES: tuple[tuple[str, Rule], ...] = (
    (
        "tells the model to ignore its instructions",
        _rule(
            ("ignore disregard forget override bypass overrule", 0),
            ("previous prior above earlier preceding all any your other existing system original", 3),
            ("instructions instruction rules guidelines prompt prompts directions directives messages", 3),
        ),
    ),
    (
        "tells the model to keep something from the user",
        _rule(
            (_NOT, 0),
            ("tell telling inform informing mention mentioning reveal revealing notify alert disclose", 1),
            (_USER, 2),
        ),
    ),
    (
        "tells the model to keep something from the user",
        _rule(("without", 0), (_USER, 2), ("knowing noticing knowledge seeing aware awareness", 2)),
    ),
    (
        "tells the model to keep something from the user",
        _rule(("do don", 0), ("not t", 0), ("mention tell reveal disclose", 0), ("this that it these", 1)),
    ),
    ("tells the model to keep something from the user", _rule(("hide conceal", 0), ("from", 4), (_USER, 2))),
    (
        "tells the model to keep something from the user",
        _rule((_USER, 0), ("must should shall will", 1), ("not never", 0), ("know see notice", 1)),
    ),
    (
        "speaks to the model as a system prompt",
        _rule(("you", 0), ("are", 0), ("now", 0)),
    ),
    ("speaks to the model as a system prompt", _rule(("from", 0), ("now", 0), ("on", 0), ("you", 2))),
    (
        "speaks to the model as a system prompt",
        _rule(("new updated", 0), ("instructions instruction directive directives", 0), ("you for", 3)),
    ),
    (
        "speaks to the model as a system prompt",
        _rule(
            ("assistant ai model llm agent claude chatgpt gpt", 0),
            ("must shall is", 0),
            ("always never secretly immediately first", 1),
        ),
    ),
    (
        "speaks to the model as a system prompt",
        _rule(("this", 0), ("is", 0), ("a an", 0), ("system", 0), ("message prompt instruction", 0)),
    ),
    (
        "speaks to the model as a system prompt",
        _rule(("reveal print repeat output show", 0), ("your the", 0), ("system", 1), ("prompt", 0)),
    ),
)
_OTHER_TOOL_RULES: tuple[tuple[str, Rule], ...] = (
    (
        "steers how other tools are used",
        _rule(
            ("before after when whenever while", 0),
            ("calling call using use invoking invoke running run", 1),
            ("other another any every all", 1),
            ("tool tools function functions server servers", 1),
        ),
    ),
    (
        "steers how other tools are used",
        _rule(
            ("when whenever", 0),
            ("calling invoking", 1),
            ("also additionally secretly instead", 8),
        ),
    ),
    (
        "steers how other tools are used",
        _rule(("instead", 0), ("of", 0), ("the using calling", 0), ("tool function", 3)),
    ),
    (
        "steers how other tools are used",
        _rule(("do don never", 0), ("not t", 1), ("use call", 0), ("the any", 0), ("tool function", 3)),
    ),
    (
        "steers how other tools are used",
        _rule(
            ("all every", 0),
            ("emails messages mails", 1),
            ("must should", 3),
            ("be", 0),
            ("sent redirected forwarded", 0),
        ),
    ),
)
_SECRET_WORDS = (
    "password passwords passphrase credentials credential secrets ssh keys key tokens token"
    " cookies cookie mnemonic seed env environment wallet keychain"
)
_SECRET_RULES: tuple[tuple[str, Rule], ...] = (
    (
        "asks for secrets or credentials",
        _rule(
            (
                "read send include append attach upload forward exfiltrate leak share reveal dump steal"
                " collect extract copy paste",
                0,
            ),
            ("the all any your user s users every their private", 2),
            (_SECRET_WORDS, 2),
            ("to in into as with inside parameter argument field along", 3),
        ),
    ),
    (
        "asks for the conversation",
        _rule(
            ("include send append attach forward pass copy upload share", 0),
            ("conversation chat entire full whole previous prior all", 3),
            ("history messages conversation context transcript", 2),
        ),
    ),
)
# Paths and names of secrets (matched in the folded text, word-bounded where short).
_SECRET_MARKS = (
    "~/.ssh", ".ssh/", "id_rsa", "id_ed25519", "id_ecdsa", "id_dsa",
    "/etc/passwd", "/etc/shadow", "master.key", "master key", "mcp.json", ".aws/credentials",
    ".git-credentials", ".npmrc", ".netrc", ".pgpass", ".docker/config.json", "toolspoke.db",
    ".bash_history", ".zsh_history", "wallet.dat", "seed phrase",
)  # fmt: skip
# Markers of text addressed to the model, not describing the tool.
_TAGS_SEEN = frozenset((
    "important", "system", "instructions", "instruction", "secret", "hidden", "admin", "assistant",
    "sys", "inst", "system-prompt", "im_start", "im_end", "|im_start|", "|im_end|", "<sys>",
))  # fmt: skip


# Every rule by its first words, so one pass over a text's words tries only the rules that can
# start there: the work is the words times the (bounded) look-ahead of the rules they open.
_RULES: tuple[tuple[str, str, Rule], ...] = tuple(
    (category, reason, rule)
    for category, rules in (
        ("instruction", _INSTRUCTION_RULES),
        ("other_tools", _OTHER_TOOL_RULES),
        ("secrets", _SECRET_RULES),
    )
    for reason, rule in rules
)
_OPENED: dict[str, tuple[int, ...]] = {}
for _i, (_, _, _r) in enumerate(_RULES):
    for _word in _r[0][0]:
        _OPENED[_word] = (*_OPENED.get(_word, ()), _i)


def _match_at(tokens: list[str], start: int, rule: Rule) -> int | None:
    """Where ``rule``, opened at ``start``, ends (each step within its gap of the last), or None."""
    at = start
    for accept, gap in rule[1:]:
        for j in range(at + 1, min(len(tokens), at + gap + 2)):
            if tokens[j] in accept:
                at = j
                break
        else:
            return None
    return at


def _rule_findings(tokens: list[str]) -> list[Finding]:
    """The first match of each reason, in the order the rules are listed."""
    spans: dict[str, tuple[int, tuple[int, int]]] = {}  # reason: (rule index, span)
    for start, tok in enumerate(tokens):
        for i in _OPENED.get(tok, ()):
            reason = _RULES[i][1]
            if reason in spans:
                continue
            end = _match_at(tokens, start, _RULES[i][2])
            if end is not None:
                spans[reason] = (i, (start, end))
    ordered = sorted(spans.values())
    return [Finding(_RULES[i][0], _RULES[i][1], _evidence(tokens, span)) for i, span in ordered]


def _evidence(tokens: list[str], span: tuple[int, int]) -> str:
    start, end = span
    return " ".join(tokens[start : min(end + 1, start + 20)])[:EVIDENCE_MAX]


def _marks(folded: str) -> Iterator[Finding]:
    for mark in _SECRET_MARKS:
        if mark in folded:
            yield Finding("secrets", "names a secret or private file", mark)
            return
    at = folded.find(".env")
    while at >= 0:
        after = folded[at + 4 : at + 5]
        if not (after.isalnum() or after == "_"):
            yield Finding("secrets", "names a secret or private file", ".env")
            return
        at = folded.find(".env", at + 4)


def _tags(folded: str) -> Iterator[Finding]:
    """``<IMPORTANT>``, ``</system>``, ``[INST]``, ``<|im_start|>``: markup aimed at the model."""
    for opener, closer in (("<", ">"), ("[", "]")):
        at = folded.find(opener)
        while at >= 0:
            end = folded.find(closer, at + 1, at + 24)
            if end > at:
                inner = folded[at + 1 : end].strip().strip("/").strip()
                if inner in _TAGS_SEEN:
                    yield Finding("instruction", "markup addressed to the model", folded[at : end + 1])
                    return
            at = folded.find(opener, at + 1)


def screen_text(text: str) -> list[Finding]:
    """The findings of one text (every category but imitation), at most one per reason."""
    text = text[:SCAN_MAX]
    found, hidden = _invisible(text)
    folded = _fold(visible(text) + ("\n" + hidden if hidden else ""))
    tokens = _WORD.findall(folded)
    found += list(_tags(folded))
    found += _rule_findings(tokens)
    found += list(_marks(folded))
    return found


def schema_text(schema: Any, limit: int = SCAN_MAX) -> str:
    """Every key and string of a schema, one a line, up to ``limit`` characters (no recursion)."""
    parts: list[str] = []
    size = 0
    stack = [schema]
    while stack and size < limit:
        node = stack.pop()
        if isinstance(node, str):
            parts.append(node)
            size += len(node) + 1
        elif isinstance(node, dict):
            for key, value in node.items():
                parts.append(str(key))
                size += len(str(key)) + 1
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return "\n".join(parts)[:limit]


def screen_tool(
    name: str, title: str, description: str, input_schema: Any, *, annotations: Any = None
) -> list[Finding]:
    """The findings of a tool's own text: name, title, description, schema, annotations."""
    parts = [name, title or "", description or "", schema_text(input_schema), schema_text(annotations or {})]
    seen: set[tuple[str, str]] = set()
    out: list[Finding] = []
    for finding in screen_text("\n".join(parts)):
        if (finding.category, finding.reason) not in seen:
            seen.add((finding.category, finding.reason))
            out.append(finding)
    return out


# --- names ----------------------------------------------------------------------------------

_LOOKALIKE = str.maketrans({"0": "o", "1": "l", "5": "s", "i": "l", "|": "l"})


def skeleton(name: str) -> str:
    """What a name looks like: folded, look-alike letters and digits merged, ``rn`` as ``m``."""
    return _fold(visible(name)).translate(_LOOKALIKE).replace("rn", "m").replace("vv", "w")


def _marked(name: str) -> str:
    # The look-alike letters as code points: "cre<U+0430>te_issue" shows what a glyph hides.
    return "".join(c if c.isascii() else f"<{_codepoint(ord(c))}>" for c in name[:EVIDENCE_MAX])


def _lookalike_letters(name: str) -> bool:
    # Non-ASCII letters that fold to ASCII: a Cyrillic "a" (U+0430) in "read_file".
    return not name.isascii() and _fold(visible(name)).translate(_HOMOGLYPHS).isascii()


@dataclass(frozen=True)
class Installed:
    """Another toolkit's tools, as the imitation check compares against them."""

    slug: str
    names: tuple[str, ...]  # upstream names


class NameIndex:
    """Every installed toolkit's slug and tool names, by how they look: built once, in one pass.

    A skeleton keeps up to two toolkits that hold it, so a toolkit is never compared with
    itself and the lookup stays constant-time however many toolkits share a name.
    """

    def __init__(self, installed: Iterable[Installed]) -> None:
        self.looks: dict[str, list[tuple[str, str]]] = {}
        self.exact: dict[str, set[str]] = {}
        self.slug_looks: dict[str, list[str]] = {}
        self.slugs: set[str] = set()
        for kit in installed:
            self.slugs.add(kit.slug)
            held = self.slug_looks.setdefault(skeleton(kit.slug), [])
            if len(held) < 2:
                held.append(kit.slug)
            for n in kit.names:
                holders = self.looks.setdefault(skeleton(n), [])
                if len(holders) < 2 and all(h[0] != kit.slug for h in holders):
                    holders.append((kit.slug, n))
                self.exact.setdefault(n.casefold(), set()).add(kit.slug)

    def imitations(self, slug: str, names: Iterable[str]) -> dict[str, list[Finding]]:
        """Imitation findings per upstream name of toolkit ``slug``.

        A name is flagged when it uses look-alike characters; when it looks like (but is not
        spelled as) another toolkit's tool; when it carries another toolkit's slug as its
        prefix; and when the toolkit's slug looks like another's and the name is one of that
        toolkit's tools.
        """
        twins = [s for s in self.slug_looks.get(skeleton(slug), []) if s != slug]
        out: dict[str, list[Finding]] = {}
        for name in names:
            found: list[Finding] = []
            shown = reveal(name[:EVIDENCE_MAX])
            if _lookalike_letters(name):
                found.append(Finding("imitation", "the name uses look-alike characters", _marked(name)))
            folded = name.casefold()
            for other, theirs in self.looks.get(skeleton(name), []):
                if other != slug and theirs.casefold() != folded:
                    found.append(Finding("imitation", f"the name imitates {other}'s tool {theirs}", shown))
                    break
            for twin in twins:
                if twin in self.exact.get(folded, ()):
                    found.append(
                        Finding("imitation", f"toolkit {slug} looks like {twin}, which has this tool", shown)
                    )
                    break
            for sep in ("__", ".", "/"):
                prefix = folded.partition(sep)[0] if sep in folded else ""
                if len(prefix) >= 4 and prefix != slug and prefix in self.slugs:
                    found.append(Finding("imitation", f"the name carries toolkit {prefix}'s prefix", shown))
                    break
            if found:
                out[name] = found
        return out


def imitations(slug: str, names: Iterable[str], others: Iterable[Installed]) -> dict[str, list[Finding]]:
    """``NameIndex(others).imitations(slug, names)``: one toolkit against the installed ones."""
    return NameIndex(others).imitations(slug, names)


def merge(*lists: Iterable[Finding]) -> list[Finding]:
    """Findings in order, each (category, reason) once."""
    seen: set[tuple[str, str]] = set()
    out = []
    for findings in lists:
        for f in findings:
            if (f.category, f.reason) not in seen:
                seen.add((f.category, f.reason))
                out.append(f)
    return out


def as_rows(findings: Iterable[Finding]) -> list[dict[str, str]]:
    return [f.as_dict() for f in findings]


def by_name(findings: Mapping[str, list[Finding]], name: str) -> list[Finding]:
    return list(findings.get(name, ()))
