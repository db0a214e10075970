"""Text preparation for the lexical index: identifier splitting, stop-words, safe MATCH.

Pure functions, no I/O. Both sides of a search go through here: ``index_text`` prepares the
four columns of ``tools_fts``; ``match_expression`` turns whatever a caller typed into an FTS5
MATCH expression that cannot be a syntax error. FTS5's own tokenizer (porter over unicode61)
then lower-cases, strips diacritics and stems both sides the same way, so this module only has
to get the *words* right: tool names are identifiers (``getPetById``, ``list_pets``,
``AclApi.add_mapping``) and queries are prose, and a search has to meet them in the middle.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

# The reference list from the retrieval bench (eval_reference.py), plus the rest of a classic
# English function-word list, plus the fragments contractions leave once the apostrophe is a
# separator ("I'm" -> "i", "m"), plus a few request fillers ("I'd like to know ...", "can you
# provide"). Content words that tools are about ("list", "search", "details") stay: tool texts
# are short, so they are signal. Measured on the dev queries of all four bench sets: +0.005 to
# +0.02 nDCG@10 on each (see the tuning log in tests/bench/retrieval_lexical.py).
_STOP_TEXT = """
a an and are as at be been but by can could do does for from get give has have help how i if in
into is it its let me my need of on or our please show so some than that the their them then
there these this to us want was we what when where which who will with would you your tell find
also
about above after again against all am any because before being below between both during each
few further here just more most no nor not now only other own same should such too very having
doing were yours ourselves himself herself itself themselves whom those while until through
over under off out up down once
s t m d ll re ve don doesn didn isn aren won
like know provide looking interested currently able
"""
STOP_WORDS: frozenset[str] = frozenset(_STOP_TEXT.split())

# Longest query text a search accepts, in characters (gateway/searching.py refuses longer,
# naming the field). Long prose needs far less (ToolBench tasks run to ~400 characters, and
# only MAX_QUERY_TOKENS tokens count); the cap bounds every pass over a query, including the
# ones outside this module (suggestions, the local embedding model's tokenizer).
MAX_QUERY_CHARS = 2_000
# Most tokens a query may contribute. Long prose (ToolBench tasks run to ~60 words) keeps its
# content words; a 100 KB paste cannot turn into a 100 KB MATCH.
MAX_QUERY_TOKENS = 48
# A longer "word" is a hash, a blob or an attack; no tool name is that long (names are <= 64).
MAX_TOKEN_CHARS = 64
# Parameter names are read this many schema levels deep (properties of properties ...).
PARAM_DEPTH = 3

# Every pattern here meets user text (queries) and upstream text (names, descriptions), so each
# must do bounded work per character: fixed-width matches or a single greedy run that never
# backtracks into itself (tests/unit/test_hostile_text.py holds each to linear growth).
_CAMEL_LOWER_UPPER = re.compile(r"([a-z0-9])([A-Z])")
# The space goes between the acronym's last capital and a capitalised word ("HTTPResponse" ->
# "HTTP Response"). Written as a zero-width position: the old ``([A-Z]+)([A-Z][a-z])`` retried
# the whole run of capitals from every start, quadratic (a 30 KB run took 97 s).
_CAMEL_ACRONYM = re.compile(r"(?<=[A-Z])(?=[A-Z][a-z])")
_LETTER_DIGIT = re.compile(r"([^\W\d_])(\d)")
_DIGIT_LETTER = re.compile(r"(\d)([^\W\d_])")
_SEPARATORS = re.compile(r"[_\-./:\\]+")
# A word is a run of letters and digits (Unicode-aware). This matches what unicode61 keeps as
# token characters closely enough; anything else (punctuation, emoji, controls, NUL, lone
# surrogates) is a separator and never reaches FTS5.
_WORD = re.compile(r"[^\W_]+")
# What an identifier looks like inside prose: a word with joiners but no spaces.
_IDENT = re.compile(r"[^\W_]+(?:[_\-./:\\]+[^\W_]+)*")


def split_identifier(text: str) -> str:
    """``getHTTPResponse2xx_v2`` -> ``get HTTP Response 2 xx v 2``.

    camelCase, acronyms, letter/digit boundaries and the separators ``_ - . / : \\``.
    """
    text = _CAMEL_LOWER_UPPER.sub(r"\1 \2", text)
    text = _CAMEL_ACRONYM.sub(" ", text)
    text = _LETTER_DIGIT.sub(r"\1 \2", text)
    text = _DIGIT_LETTER.sub(r"\1 \2", text)
    return _SEPARATORS.sub(" ", text)


def words(text: str) -> list[str]:
    """Lower-cased words of ``text`` after identifier splitting."""
    return [w.lower() for w in _WORD.findall(split_identifier(text))]


def identifier_text(identifier: str) -> str:
    """The split words of an identifier, then its joined form when that is a new token.

    ``getPetById`` -> ``get Pet By Id getpetbyid``: the joined form lets a query that names the
    tool exactly score on one rare token; the split words let ``get pet by id`` and
    ``pet_by_id`` find it too. Repeating the words instead (``get_pet_by_id`` twice) would only
    inflate their term frequency, which measured worse.
    """
    split = split_identifier(identifier)
    joined = _squash(identifier)
    if not joined or joined in split.lower().split():
        return split
    return f"{split} {joined}"


def param_names(schema: Any, depth: int = 0) -> list[str]:
    """Property names of a JSON Schema, ``PARAM_DEPTH`` levels deep, arrays' items included."""
    out: list[str] = []
    if not isinstance(schema, dict) or depth >= PARAM_DEPTH:
        return out
    props = schema.get("properties")
    if isinstance(props, dict):
        for key, sub in props.items():
            out.append(str(key))
            out.extend(param_names(sub, depth + 1))
    items = schema.get("items")
    if isinstance(items, dict):
        out.extend(param_names(items, depth + 1))
    return out


def action_of(name: str) -> str:
    """``petstore__getPetById`` -> ``getPetById``; a name without the separator is its own action."""
    _, sep, action = name.partition("__")
    return action if sep else name


def index_text(
    name: str,
    toolkit: str,
    group: str,
    description: str,
    input_schema: Any,
    *,
    upstream_name: str = "",
) -> tuple[str, str, str, str]:
    """The four ``tools_fts`` columns: (name, toolkit, description, params).

    name: the upstream name (else the action part of ``name``), split and joined. toolkit:
    the group (OpenAPI tag, catalogue toolkit) and the toolkit slug. description: split so
    camelCase words inside prose match. params: every property name, split. (The fifth,
    ``exact`` column is filled by ``fts``.)
    """
    # The action is derived from the upstream name (sanitised, maybe shortened with a hash
    # suffix), so it adds words only when there is no upstream name to index instead.
    name_col = identifier_text(upstream_name or action_of(name))
    kits = [group] if group else []
    if toolkit and _squash(toolkit) != _squash(group):
        kits.append(toolkit)
    toolkit_col = " ".join(identifier_text(k) for k in kits)
    description_col = split_identifier(description or "")
    params_col = " ".join(split_identifier(p) for p in dict.fromkeys(param_names(input_schema)))
    return name_col, toolkit_col, description_col, params_col


def _squash(text: str) -> str:
    return "".join(_WORD.findall(text)).lower()


def query_tokens(user_text: str) -> list[str]:
    """Distinct search tokens of any text: split words (stop-words dropped) and joined identifiers.

    Stop-words are kept only when nothing else is left ("who am I" still searches).
    """
    content: list[str] = []
    stops: list[str] = []
    seen: set[str] = set()
    for token in _tokens(user_text):
        if token in seen or len(token) > MAX_TOKEN_CHARS:
            continue
        seen.add(token)
        (stops if token in STOP_WORDS else content).append(token)
        if len(content) >= MAX_QUERY_TOKENS:
            break
    return content or stops[:MAX_QUERY_TOKENS]


def _tokens(user_text: str) -> Iterator[str]:
    for match in _IDENT.finditer(user_text):
        ident = match.group()
        if ident.isalpha() and ident.islower():
            # A plain prose word splits to itself; skipping five regex passes per word was a
            # fifth of a search's time on long queries.
            yield ident
            continue
        parts = words(ident)
        yield from parts
        if len(parts) > 1:
            # "getPetById" or "list_pets" typed as one word: its joined form is the rare token
            # the index holds for exactly that tool name.
            yield _squash(ident)


def match_expression(user_text: str) -> str | None:
    """A safe FTS5 MATCH expression for any text, or None when nothing searchable remains.

    Every token is a double-quoted string (so ``AND``, ``NEAR``, ``*``, ``:`` and ``^`` are
    plain words) and the tokens are OR-ed, because FTS5 ANDs bare terms and one missing word
    would empty the result.
    """
    tokens = query_tokens(user_text)
    if not tokens:
        return None
    return " OR ".join(quote(t) for t in tokens)


def quote(token: str) -> str:
    """An FTS5 string literal: double quotes doubled, nothing else is special inside."""
    return '"' + token.replace('"', '""') + '"'
