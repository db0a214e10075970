"""``WWW-Authenticate`` as RFC 9110 §11.6.1 writes it, read strictly and within bounds.

Only the ``Bearer`` challenge matters here (RFC 6750 §3; RFC 9728 §5.1 adds
``resource_metadata``). A header we cannot read is treated as no challenge at all: the
caller then falls back to the well-known locations, never to a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_HEADER = 8192  # a challenge longer than this is not one we act on
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = r'"(?:[^"\\\x00-\x08\x0a-\x1f\x7f]|\\[\x09\x20-\x7e])*"'
_PARAM = re.compile(rf"\s*({_TOKEN})\s*=\s*({_TOKEN}|{_QUOTED})\s*")
_SCHEME = re.compile(rf"\s*({_TOKEN})(?:\s+|$)")
_TOKEN68 = re.compile(r"\s*[A-Za-z0-9\-._~+/]+=*\s*(?=,|$)")
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749 §3.3 scope-token


@dataclass(frozen=True)
class Challenge:
    scheme: str
    params: dict[str, str] = field(default_factory=dict)

    @property
    def resource_metadata(self) -> str | None:
        return self.params.get("resource_metadata")

    @property
    def error(self) -> str | None:
        return self.params.get("error")

    @property
    def scopes(self) -> tuple[str, ...]:
        return scopes_of(self.params.get("scope", ""))


def scopes_of(text: str) -> tuple[str, ...]:
    """The scope tokens of a space-separated ``scope`` value; malformed tokens are dropped."""
    seen: dict[str, None] = {}
    for token in text.split(" "):
        if token and _SCOPE_TOKEN.fullmatch(token):
            seen.setdefault(token, None)
    return tuple(seen)


def _unquote(value: str) -> str:
    if value.startswith('"'):
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def parse(header: str | None) -> list[Challenge]:
    """Every challenge of the header, in order; [] when it is absent, too long or malformed."""
    if not header or len(header) > MAX_HEADER:
        return []
    out: list[Challenge] = []
    pos, n = 0, len(header)
    while pos < n:
        while pos < n and header[pos] in " \t,":
            pos += 1
        if pos >= n:
            break
        scheme = _SCHEME.match(header, pos)
        if scheme is None:
            return []
        pos = scheme.end()
        params: dict[str, str] = {}
        token68 = _TOKEN68.match(header, pos)
        if token68 is not None and not _PARAM.match(header, pos):
            pos = token68.end()
        else:
            while pos < n:
                param = _PARAM.match(header, pos)
                if param is None:
                    break
                name = param.group(1).lower()
                if name in params:
                    return []  # RFC 9110: each parameter name only once per challenge
                params[name] = _unquote(param.group(2))
                pos = param.end()
                if pos < n and header[pos] == ",":
                    following = header[pos + 1 :]
                    if _PARAM.match(following) or not following.strip():
                        pos += 1
                        continue
                    break  # the next challenge starts after this comma
                break
        out.append(Challenge(scheme.group(1).lower(), params))
        if pos < n and header[pos] not in ", \t":
            return []
    return out


def bearer(header: str | None) -> Challenge | None:
    """The ``Bearer`` challenge of a ``WWW-Authenticate`` header, else its ``DPoP`` one
    (RFC 9449 §7.1: the same parameters), if it has either."""
    found = parse(header)
    return next((c for c in found if c.scheme == "bearer"), None) or next(
        (c for c in found if c.scheme == "dpop"), None
    )
