"""``Secret``: a credential held in memory that no repr, log line or traceback can print.

It lives below every layer (like ``errors``) because settings, the vault, the gateway and
the upstream transport all hand secrets along; only the code that puts one on the wire
calls ``reveal()``.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import re
from collections.abc import Iterable
from typing import Any, NoReturn
from urllib.parse import quote, quote_plus

import ahocorasick

REDACTED = "[redacted]"


class Secret:
    """A string that shows as ``[redacted]`` in ``repr``, ``str``, f-strings and ``%s``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError("a Secret wraps a str")
        self._value = value

    def reveal(self) -> str:
        """The value itself: call this only where it goes on the wire or into the vault."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({REDACTED!r})"

    def __str__(self) -> str:
        return REDACTED

    def __format__(self, spec: str) -> str:
        return REDACTED

    def __bool__(self) -> bool:
        return bool(self._value)

    def __len__(self) -> int:
        return len(self._value)

    def __eq__(self, other: object) -> bool:
        # Constant time: a comparison must not leak a prefix through its timing.
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret cannot be pickled or copied out of the process")

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self

    def __copy__(self) -> Secret:
        return self


# Forms shorter than this are not searched for: redacting every "ab" in a body would
# destroy answers, and a secret that short is not one (the vault refuses such values).
MIN_FORM = 6

_URLSAFE = str.maketrans("+/", "-_")
_ESCAPE = re.compile(r"%[0-9A-F]{2}")  # fixed width: no backtracking


def _b64_core(raw: bytes, offset: int) -> str:
    """The base64 characters that depend on ``raw`` alone when it starts ``offset`` bytes
    (mod 3) into a longer encoded string: ``user:<secret>`` puts it at offset 5 % 3 = 2.

    Character k of an encoding covers bits [6k, 6k+6); the secret's bits are
    [8·offset, 8·(offset+len)). The characters wholly inside are the same whatever comes
    before or after, so they are a needle; the one or two straddling a boundary are not
    (they carry under 6 bits of the secret each).
    """
    encoded = base64.b64encode(b"\0" * offset + raw + b"\0\0").decode()
    start = -(-8 * offset // 6)  # ceil
    end = (8 * offset + 8 * len(raw)) // 6
    return encoded[start:end]


def secret_forms(value: str) -> set[str]:
    """The ways a secret can come back in text: as is, URL-encoded (either escape case),
    JSON-escaped, hex (either case), and base64 (standard and URL-safe, padded or not, at
    any of the three alignments inside a longer encoded string)."""
    raw = value.encode()
    b64 = base64.b64encode(raw).decode()
    quoted = {quote(value, safe=""), quote_plus(value), quote(value, safe="/:@!$&'()*+,;=-._~")}
    forms = {
        value,
        *quoted,
        *(_ESCAPE.sub(lambda m: m.group().lower(), q) for q in quoted),
        b64,
        b64.translate(_URLSAFE),
        raw.hex(),
        raw.hex().upper(),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
    }
    for offset in range(3):
        core = _b64_core(raw, offset)
        forms |= {core, core.translate(_URLSAFE)}
    return {f for f in forms if len(f) >= MIN_FORM}


class Needles:
    """Every form of some secrets, compiled once into one Aho-Corasick automaton.

    Immutable once built, so one instance (the whole vault's) is shared by every call. A
    search is one pass over the text in C, linear in its length whatever the number of
    secrets: a regular-expression alternation of the forms tries each at every position
    (2.2 s for 1 MiB against 1,000 secrets).
    """

    __slots__ = ("_automaton", "_values", "size")

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values = frozenset(v for v in values if v)
        forms: set[str] = set()
        for v in self._values:
            forms |= secret_forms(v)
        self.size = len(forms)
        self._automaton: Any = None
        if forms:
            automaton = ahocorasick.Automaton(ahocorasick.STORE_LENGTH)
            for form in forms:
                automaton.add_word(form)
            automaton.make_automaton()
            self._automaton = automaton

    def __bool__(self) -> bool:
        return self._automaton is not None

    def __repr__(self) -> str:
        return f"Needles(secrets={len(self._values)}, forms={self.size})"

    @property
    def secrets(self) -> int:
        return len(self._values)

    def missing(self, values: Iterable[str]) -> tuple[str, ...]:
        """Those of ``values`` these needles do not cover."""
        return tuple(v for v in values if v and v not in self._values)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Every ``[start, end)`` where a form occurs (overlaps included), in order of end."""
        if self._automaton is None:
            return []
        # ``iter`` reports every match; ``iter_long`` is not used: it has missed matches
        # (pyahocorasick #133, #185), and a missed match here is a leaked secret.
        return [(end + 1 - length, end + 1) for end, length in self._automaton.iter(text)]


NO_NEEDLES = Needles()


class Redactor:
    """Replaces every known form of some secrets with ``[redacted]`` in text and JSON values.

    ``values`` are compiled here (a few, per call); ``needles`` are shared, prebuilt sets
    (the vault's). ``hits`` counts the values replaced, for the audit row.
    """

    def __init__(self, values: Iterable[str] = (), *, needles: Iterable[Needles] = ()) -> None:
        given = tuple(n for n in needles if n)
        values = tuple(values)
        own = Needles(values) if values else NO_NEEDLES  # the call path passes none: no build
        self._needles = (*given, own) if own else given
        self.hits = 0

    def __bool__(self) -> bool:
        return bool(self._needles)

    def text(self, value: str) -> str:
        if not self._needles or not value:
            return value
        if len(self._needles) == 1:
            spans = self._needles[0].spans(value)
        else:
            spans = [s for n in self._needles for s in n.spans(value)]
        if not spans:
            return value
        spans.sort()
        out: list[str] = []
        at = 0  # the end of what has been copied or replaced so far
        start, end = spans[0]
        for s, e in spans[1:]:
            if s < end:  # overlapping (or nested): one replacement covers both
                end = max(end, e)
                continue
            out += (value[at:start], REDACTED)
            self.hits += 1
            at, start, end = end, s, e
        out += (value[at:start], REDACTED, value[end:])
        self.hits += 1
        return "".join(out)

    def value(self, obj: Any) -> Any:
        """``obj`` with every string (keys included) redacted; other values unchanged."""
        if not self._needles:
            return obj
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.value(v) for v in obj]
        return obj


# -- the process-wide needles, for log lines ------------------------------------------------

_published: Needles = NO_NEEDLES


def publish(needles: Needles) -> None:
    """Make ``needles`` (the whole vault's, loaded by ``gateway/redaction.py``) the ones every
    log line of this process is redacted against."""
    global _published
    _published = needles


def published() -> Needles:
    return _published


def redact_text(value: str) -> str:
    """``value`` redacted against the published needles (a no-op while the vault is empty)."""
    return Redactor(needles=(_published,)).text(value) if _published else value


def install_log_redaction() -> None:
    """Redact every log record of this process, whichever logger or handler it goes to.

    A record factory, not a filter: a filter on the root logger misses records of loggers
    that do not propagate (Sanic's), and one per handler misses handlers added later. The
    message is rendered here once (``QueueHandler`` renders it anyway) and so is an
    exception's traceback, whose messages may quote an upstream too.
    """
    factory = logging.getLogRecordFactory()
    if getattr(factory, "toolspoke_redacting", False):
        return

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        if not _published:
            return record
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed logger call: the handler reports it
            return record
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = redact_text(_FORMATTER.formatException(record.exc_info))
        return record

    make.toolspoke_redacting = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make)


_FORMATTER = logging.Formatter()
