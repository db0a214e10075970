"""Which parts of an example are a credential, and which credential the toolkit keeps (pure).

A header that looks like one (``Authorization``, ``Cookie``, ``X-API-Key``, any name with
``token``, ``secret``, ``api-key`` or ``auth``) and a query parameter named like one
(``api_key``, ``access_token``, ``*token*``, ``*secret*``) never become tool inputs: they
become the toolkit's vault credential in one of the existing schemes (bearer, basic,
header, cookie, query). A toolkit has one credential, so when the examples show several
kinds, the one seen most is kept and the others are reported by name, never by value.
Values stay in ``Seen`` (whose repr hides them) until the gateway seals one.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections import Counter
from dataclasses import dataclass, field

_HEADER_WORDS = re.compile(r"token|secret|api[-_]?key|auth|session|password", re.IGNORECASE)
_QUERY_WORDS = re.compile(r"token|secret|api[-_]?key|password|^key$|^sig(nature)?$", re.IGNORECASE)
_NOT_CREDENTIAL = {"x-csrf-token", "x-xsrf-token", "x-request-id"}


@dataclass(frozen=True)
class Seen:
    """One credential as one example sent it."""

    scheme: str  # bearer, basic, header, cookie, query
    name: str  # the header, cookie or query parameter it is sent as
    parts: dict[str, str] = field(repr=False)  # token | value | username and password
    where: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return self.scheme, self.name.lower() if self.scheme != "query" else self.name


@dataclass(frozen=True)
class Chosen:
    scheme: str
    name: str
    parts: dict[str, str] = field(repr=False)
    entries: tuple[str, ...]
    values_seen: int  # distinct values of this credential across the examples

    def document(self) -> dict[str, str]:
        """The credential as ``gateway/credentials.parse_credential`` takes it."""
        if self.scheme in ("bearer", "basic"):
            return {"scheme": self.scheme, **self.parts}
        return {"scheme": self.scheme, "name": self.name, **self.parts}


def credential_header(name: str) -> bool:
    lowered = name.lower()
    if lowered in _NOT_CREDENTIAL:
        return False
    return lowered in ("authorization", "cookie") or bool(_HEADER_WORDS.search(lowered))


def credential_query(name: str) -> bool:
    return bool(_QUERY_WORDS.search(name))


def from_header(name: str, value: str, where: str) -> Seen | None:
    """The credential a header carries (None for an empty one)."""
    value = value.strip()
    if not value:
        return None
    lowered = name.lower()
    if lowered == "authorization":
        scheme, _, rest = value.partition(" ")
        rest = rest.strip()
        if scheme.lower() == "bearer" and rest:
            return Seen("bearer", "Authorization", {"token": rest}, where)
        if scheme.lower() == "basic" and rest:
            pair = _basic(rest)
            if pair is not None:
                return Seen("basic", "Authorization", {"username": pair[0], "password": pair[1]}, where)
        return Seen("header", "Authorization", {"value": value}, where)
    if lowered == "cookie":
        pairs = [p.strip().partition("=") for p in value.split(";")]
        named = [(k.strip(), v.strip()) for k, sep, v in pairs if sep and k.strip()]
        if not named:
            return None
        pick = next(((k, v) for k, v in named if _HEADER_WORDS.search(k) or k.lower() in ("sid",)), named[0])
        return Seen("cookie", pick[0], {"value": pick[1]}, where)
    return Seen("header", name, {"value": value}, where)


def from_query(name: str, value: str, where: str) -> Seen | None:
    return Seen("query", name, {"value": value}, where) if value else None


def _basic(encoded: str) -> tuple[str, str] | None:
    try:
        text = base64.b64decode(encoded, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = text.partition(":")
    return (user, password) if sep else None


def choose(seen: list[Seen]) -> tuple[Chosen | None, list[str]]:
    """The credential to keep (the kind seen most, its last value) and notes on the rest."""
    if not seen:
        return None, []
    counts = Counter(s.key for s in seen)
    key = max(counts, key=lambda k: (counts[k], k))
    mine = [s for s in seen if s.key == key]
    last = mine[-1]  # the latest recording is the likeliest to be current
    values = {tuple(sorted(s.parts.items())) for s in mine}
    notes = []
    if len(values) > 1:
        notes.append(
            f"the examples send {len(values)} different values of the {last.scheme} credential "
            f"({last.name}); the last one ({last.where}) is kept"
        )
    for other in sorted(k for k in counts if k != key):
        notes.append(
            f"the examples also send a {other[0]} credential ({other[1]}): not kept (a toolkit has one "
            "credential; set another with 'toolspoke credentials set')"
        )
    entries = tuple(dict.fromkeys(s.where for s in mine))
    return Chosen(last.scheme, last.name, dict(last.parts), entries, len(values)), notes


def values(seen: list[Seen]) -> list[str]:
    """Every credential value the examples hold (what must never show anywhere)."""
    return sorted({v for s in seen for v in s.parts.values() if v})
