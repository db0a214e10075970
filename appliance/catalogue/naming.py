"""Tool names: ``<slug>__<action>``, at most 64 characters of ``[A-Za-z0-9_-]``.

MCP clients and the LLM APIs behind them reject other tool names, so every converter
goes through here. Names are deterministic: the same input always yields the same
name, whatever order the operations come in, so a re-import keeps tool identities.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from appliance.errors import ImportFailed

MAX_NAME = 64
SEPARATOR = "__"
_HASH_LEN = 6
_SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")
_INVALID_RUN = re.compile(r"[^A-Za-z0-9_-]+")


def validate_slug(slug: str) -> str:
    """Return ``slug`` if it can prefix tool names; else raise ImportFailed(field="slug")."""
    if not isinstance(slug, str) or not _SLUG_RE.match(slug) or SEPARATOR in slug:
        raise ImportFailed(
            "slug must be 1-31 characters of lower-case letters, digits and '-', "
            f"starting with a letter or digit (got {slug!r})",
            field="slug",
        )
    return slug


def short_hash(text: str, length: int = _HASH_LEN) -> str:
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()[:length]


def sanitise_action(raw: str) -> str:
    """Runs of characters outside ``[A-Za-z0-9_-]`` become one ``_``; edges are trimmed.

    ``"find pet by id"`` → ``"find_pet_by_id"``; an action that sanitises to nothing
    (emoji only, say) becomes ``"tool_<hash>"`` so it still has a stable name.
    """
    action = _INVALID_RUN.sub("_", raw).strip("_-")
    return action or f"tool_{short_hash(raw)}"


def action_from_route(method: str, path: str) -> str:
    """An action for an operation without operationId: ``GET /pets/{petId}`` → ``get_pets_petId``."""
    return sanitise_action(f"{method.lower()} {path}")


def tool_name(slug: str, action: str) -> str:
    """``<slug>__<action>``, shortened deterministically when over 64 characters.

    The cut keeps a readable prefix and appends ``_`` + 6 hex of the *whole* action, so
    two long actions sharing a prefix still get different names.
    """
    action = sanitise_action(action)
    name = f"{slug}{SEPARATOR}{action}"
    if len(name) <= MAX_NAME:
        return name
    room = MAX_NAME - len(slug) - len(SEPARATOR) - 1 - _HASH_LEN
    head = action[:room].rstrip("_-") or action[:1]
    return f"{slug}{SEPARATOR}{head}_{short_hash(action)}"


def assign_names(slug: str, items: Sequence[tuple[str, str]]) -> list[str]:
    """Unique tool names for ``(raw_action, unique_key)`` pairs, in the same order.

    When several raw actions sanitise to the same name, *every* one of them gets a
    suffix hashed from its ``unique_key`` (``"POST /pets"``, ``"toolkit/name"``): the
    outcome then depends only on each item, never on which came first.
    """
    names = [tool_name(slug, raw) for raw, _ in items]
    for length in (_HASH_LEN, 10, 16, 40):
        counts = Counter(names)
        clashing = [i for i, n in enumerate(names) if counts[n] > 1]
        if not clashing:
            return names
        for i in clashing:
            raw, key = items[i]
            names[i] = tool_name(slug, f"{sanitise_action(raw)}_{short_hash(key, length)}")
    dupes = sorted(n for n, c in Counter(names).items() if c > 1)
    raise ImportFailed(f"two tools have the same identity: {dupes[0]}", field="name")


# Did-you-mean: the work is bounded whatever the catalogue or the caller sends. A longer
# "name" than any tool can have gets no suggestion; at most SUGGEST_POOL candidates are
# compared (difflib: about 10 µs each), those of the toolkit it names (else sharing its first
# letters) first.
SUGGEST_INPUT_MAX = MAX_NAME + 16
SUGGEST_POOL = 1000
CLOSE = 0.6  # difflib's ratio at which get_close_matches calls two strings close


def close_names(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` of ``candidates`` that look like ``name`` (case aside), closest first.

    Names of the toolkit ``name`` names are compared by their action alone (a shared
    ``slug__`` would make every one of them look close), and so is a bare action. The
    caller hands in only names the asker may see, so a suggestion reveals nothing."""
    if not name or len(name) > SUGGEST_INPUT_MAX:
        return []
    pool: dict[str, str] = {}
    for c in candidates:
        pool.setdefault(c.lower(), c)
    lowered = name.lower()
    slug, sep, action = lowered.partition(SEPARATOR)
    prefix = slug + sep if sep else None
    keys = list(pool)
    if len(keys) > SUGGEST_POOL:  # the same toolkit's names first, else the same first letters
        near = [k for k in keys if k.startswith(prefix)] if prefix else []
        near = near or [k for k in keys if k[:2] == lowered[:2]]
        keys = (near or keys)[:SUGGEST_POOL]
    matcher = difflib.SequenceMatcher(autojunk=False)
    scored: list[tuple[float, str]] = []
    for key in keys:
        if prefix is None:  # a bare action: compared with each name's action
            mine, theirs = lowered, key.partition(SEPARATOR)[2] or key
        elif key.startswith(prefix):  # the toolkit it names: compared by action alone
            mine, theirs = action, key[len(prefix) :]
        else:  # another toolkit: the whole name (a typo in the slug)
            mine, theirs = lowered, key
        matcher.set_seqs(theirs, mine)
        # difflib's cheap upper bounds first, as get_close_matches does.
        if matcher.real_quick_ratio() >= CLOSE and matcher.quick_ratio() >= CLOSE:
            score = matcher.ratio()
            if score >= CLOSE:
                scored.append((score, key))
    scored.sort(key=lambda s: (-s[0], s[1]))
    return [pool[k] for _, k in scored[:n]]
