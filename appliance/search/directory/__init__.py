"""The bundled directory of well-known toolkits that are not installed: searchable suggestions.

``toolkits.json`` beside this file lists MCP reference servers and public OpenAPI descriptions
with the command that installs each. A search offers an entry as a *suggestion* (never as a
callable result) when the entry covers the query's words better than the best installed tool
does. Scoring is IDF-weighted word coverage over this small directory (a dozen entries: an
index would be overkill), with a light suffix-stripping stemmer so "messages" meets "message".
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.search.text import query_tokens, words

log = logging.getLogger(__name__)
DIRECTORY = Path(__file__).resolve().parent / "toolkits.json"
# An entry must cover at least this share of the query's (IDF-weighted) words to be offered.
MIN_COVERAGE = 0.5
MAX_SUGGESTIONS = 3


@dataclass(frozen=True)
class Entry:
    slug: str
    title: str
    kind: str  # mcp | openapi
    description: str
    tools: tuple[str, ...]
    command: str
    source: str  # OpenAPI URL or MCP package name: how an installed copy is recognised
    stems: frozenset[str]

    def suggestion(self) -> dict[str, Any]:
        install: dict[str, Any] = {"command": self.command}
        if self.kind == "openapi":
            install["admin_api"] = {
                "method": "POST",
                "path": "/api/v1/toolkits/openapi",
                "body": {"slug": self.slug, "source": self.source},
            }
        return {
            "toolkit": self.slug,
            "title": self.title,
            "kind": self.kind,
            "description": self.description,
            "tools": list(self.tools),
            "install": install,
        }


def stem(word: str) -> str:
    for suffix in ("ing", "ies", "es", "ed", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def stems_of(text: str) -> frozenset[str]:
    return frozenset(stem(w) for w in words(text))


@functools.cache
def entries() -> tuple[Entry, ...]:
    """The directory's entries; none (and a warning) when the file is missing or broken, so a
    packaging mistake costs suggestions, never a search."""
    try:
        doc = json.loads(DIRECTORY.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("toolkit directory unavailable (%s); no suggestions", type(exc).__name__)
        return ()
    out = []
    for e in doc["toolkits"]:
        text = " ".join([e["slug"], e["title"], e["description"], *e["tools"]])
        out.append(
            Entry(
                e["slug"],
                e["title"],
                e["kind"],
                e["description"],
                tuple(e["tools"]),
                e["command"],
                e.get("source") or e.get("package", ""),
                stems_of(text),
            )
        )
    return tuple(out)


@functools.cache
def _idf() -> dict[str, float]:
    n = max(1, len(entries()))
    df: dict[str, int] = {}
    for e in entries():
        for s in e.stems:
            df[s] = df.get(s, 0) + 1
    return {s: 1 + math.log(n / d) for s, d in df.items()}


def coverage(query: str, stems: frozenset[str]) -> float:
    """IDF-weighted share of the query's content words found in ``stems`` (0..1)."""
    tokens = {stem(t) for t in query_tokens(query)}
    if not tokens:
        return 0.0
    idf = _idf()
    unseen = 1 + math.log(len(entries()) + 1)
    total = sum(idf.get(t, unseen) for t in tokens)
    return sum(idf.get(t, unseen) for t in tokens if t in stems) / total


def suggest(
    query: str, slugs: Collection[str], sources: Collection[str], installed_best: float
) -> list[dict[str, Any]]:
    """Entries not installed (by slug, or their package or URL in an installed toolkit's source)
    that cover ``query`` at least ``MIN_COVERAGE`` and better than the best installed tool
    (``installed_best``, the same coverage measure), best first."""
    have = {s.lower() for s in slugs}
    origin = " ".join(sources).lower()
    scored = []
    for e in entries():
        if e.slug in have or (e.source and e.source.lower() in origin):
            continue
        c = coverage(query, e.stems)
        if c >= MIN_COVERAGE and c > installed_best:
            scored.append((c, e))
    scored.sort(key=lambda x: -x[0])
    return [{**e.suggestion(), "coverage": round(c, 3)} for c, e in scored[:MAX_SUGGESTIONS]]
