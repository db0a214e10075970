"""The ``pattern`` keyword of a tool's input schema, checked with a bound on work.

A tool's schema comes from an upstream (an OpenAPI spec, an MCP server's ``tools/list``) and
its arguments from a caller; Python's ``re`` backtracks, so ``^(a+)+$`` against thirty ``a``
and a ``b`` takes minutes, on the event loop, for every call. The gateway's check is a
courtesy (the upstream validates its own input), so instead of asserting every pattern it
asserts only those whose worst case it can bound:

* a repeat inside a repeat, an alternation or lookaround inside a repeat, or a backreference:
  backtracking can be exponential; never asserted here;
* otherwise ``r`` variable-width repeats cost at most about ``n ** (r + 1)`` steps on a string
  of ``n`` characters (``re.search`` tries every start; each repeat may give back every
  character), so the pattern is asserted when that is within ``MAX_STEPS``.

Anything not asserted is left to the upstream, exactly as a schema keyword the gateway does
not understand would be.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from re import _parser as sre_parse  # type: ignore[attr-defined]  # the parser re itself uses
from typing import Any

from jsonschema.exceptions import ValidationError

MAX_STEPS = 1_000_000  # ~10 ms of backtracking at worst per checked value
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}
_AMBIGUOUS = _REPEATS | {"BRANCH", "ASSERT", "ASSERT_NOT", "GROUPREF", "GROUPREF_EXISTS"}


def _children(av: Any) -> Iterator[Any]:
    """The sub-patterns of one parsed node's argument."""
    if isinstance(av, sre_parse.SubPattern):
        yield av
    elif isinstance(av, list | tuple):
        for item in av:
            yield from _children(item)


def _count(pattern: Any, inside_repeat: bool) -> int | None:
    """Variable-width repeats in ``pattern``, or None when its backtracking has no polynomial bound."""
    total = 0
    for op, av in pattern:
        name = str(op)
        if name in ("GROUPREF", "GROUPREF_EXISTS"):
            return None
        if inside_repeat and name in _AMBIGUOUS:
            return None
        repeat = name in _REPEATS
        if repeat:
            low, high, _ = av
            repeat = high != low
        for sub in _children(av):
            inner = _count(sub, inside_repeat or repeat)
            if inner is None:
                return None
            total += inner
        total += int(repeat)
    return total


@functools.lru_cache(maxsize=4096)
def repeats(pattern: str) -> int | None:
    """How many variable-width repeats ``pattern`` has; None: unbounded backtracking (or not a
    pattern Python can compile)."""
    try:
        return _count(sre_parse.parse(pattern), False)
    except (re.error, RecursionError, OverflowError, ValueError, TypeError):
        return None


def checkable(pattern: str, length: int) -> bool:
    """Whether matching ``pattern`` against ``length`` characters is bounded by MAX_STEPS."""
    r = repeats(pattern)
    return r is not None and (length + 1) ** (r + 1) <= MAX_STEPS


def bounded_pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """jsonschema's ``pattern`` keyword, asserted only where its work is bounded."""
    if not validator.is_type(instance, "string") or not isinstance(pattern, str):
        return
    if checkable(pattern, len(instance)) and not re.search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")
