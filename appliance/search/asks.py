"""The separate asks in a long request. Pure.

An agent often sends search a whole task: "I'm planning a trip to Paris. Find me flights for
next week and also check the weather there. Convert the prices to euros." One embedding of all
of it lands between the tools it needs, and the words of one ask drown the others' in BM25.
Hybrid search therefore also ranks each ask on its own and lets a tool that one ask finds
strongly climb (``hybrid.rank``; docs/search.md, "Asks").

An ask is a line, a sentence, or a clause joined by "and", "then", "also" or "as well as":
split word by word (runs of non-space), so the work stays linear in the query however it is spaced.
Pieces under ``MIN_WORDS`` words ("I also", "Ethereum" out of "Bitcoin and Ethereum") say too
little to rank by and are dropped. A request yields asks only when it has at least two; each
costs a lexical pass, so at most ``MAX_ASKS`` are kept, the longest (the short ones are mostly
scene-setting: "Hi there.", "Thanks a lot!"), in their order. Each ask keeps where it stands in
the request: the local model pools its vector from the request's own token states
(``embedders.LocalEmbedder.embed_query``), one run of the model for the request and its asks.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# Dev queries, two-fold cross-validated (docs/search.md): 3 to 5 words scored alike; keeping
# the longest 4 asks scored as all of them (ToolBench requests run to 8), the first 4 lower.
MIN_WORDS = 3
MAX_ASKS = 4
_WORD = re.compile(r"\S+")
# Words that end a clause and start the next ask; dropped from both.
_JOINERS = frozenset({"and", "then", "also"})
# ASCII and the ideographic full stop, question mark, exclamation mark and semicolon.
_SENTENCE_ENDS = (".", "?", "!", ";", "\u3002", "\uff1f", "\uff01", "\uff1b")


class Ask(NamedTuple):
    text: str
    start: int  # where the ask's first word starts in the request (a character offset)
    end: int  # where its last word ends (exclusive)


def asks_of(query: str) -> list[Ask]:
    """The request's asks, in order (at most ``MAX_ASKS``, each ``MIN_WORDS`` words or more);
    empty when it holds fewer than two."""
    pieces: list[list[re.Match[str]]] = []
    current: list[re.Match[str]] = []
    words = list(_WORD.finditer(query))
    i = 0
    while i < len(words):
        word = words[i].group()
        lowered = word.lower()
        gap = query[words[i - 1].end() : words[i].start()] if i else ""
        if "\n" in gap or "\r" in gap:  # a new line starts a new ask
            pieces.append(current)
            current = []
        if lowered in _JOINERS:
            pieces.append(current)
            current = []
            i += 1
            continue
        if lowered == "as" and [w.group().lower() for w in words[i + 1 : i + 3]] == ["well", "as"]:
            pieces.append(current)
            current = []
            i += 3
            continue
        current.append(words[i])
        if word.endswith(_SENTENCE_ENDS):
            pieces.append(current)
            current = []
        i += 1
    pieces.append(current)
    kept = [p for p in pieces if len(p) >= MIN_WORDS]
    if len(kept) < 2:
        return []
    if len(kept) > MAX_ASKS:
        # ``sorted`` is stable: among equally long asks the earlier ones stay.
        longest = sorted(range(len(kept)), key=lambda i: -len(kept[i]))[:MAX_ASKS]
        kept = [kept[i] for i in sorted(longest)]
    return [Ask(" ".join(w.group() for w in p).rstrip(","), p[0].start(), p[-1].end()) for p in kept]
