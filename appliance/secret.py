"""``Secret``: a credential held in memory that no repr, log line or traceback can print.

It lives below every layer (like ``errors``) because settings, the vault, the gateway and
the upstream transport all hand secrets along; only the code that puts one on the wire
calls ``reveal()``.
"""

from __future__ import annotations

import base64
import hmac
import json
import re
from collections.abc import Iterable
from typing import Any, NoReturn
from urllib.parse import quote, quote_plus

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


def secret_forms(value: str) -> set[str]:
    """The ways a secret can come back in text: as is, URL-encoded, base64, hex, JSON-escaped."""
    raw = value.encode()
    b64 = base64.b64encode(raw).decode()
    forms = {
        value,
        quote(value, safe=""),
        quote_plus(value),
        quote(value, safe="/:@!$&'()*+,;=-._~"),
        b64,
        b64.rstrip("="),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        raw.hex(),
        raw.hex().upper(),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
    }
    return {f for f in forms if len(f) >= MIN_FORM}


class Redactor:
    """Replaces every known form of some secrets with ``[redacted]`` in text and JSON values."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        forms: set[str] = set()
        for v in values:
            if v:
                forms |= secret_forms(v)
        # Longest first, so a form that contains another is replaced whole.
        ordered = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(f) for f in ordered)) if ordered else None
        self.hits = 0

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, value: str) -> str:
        if self._pattern is None or not value:
            return value
        out, n = self._pattern.subn(REDACTED, value)
        self.hits += n
        return out

    def value(self, obj: Any) -> Any:
        """``obj`` with every string (keys included) redacted; other values unchanged."""
        if self._pattern is None:
            return obj
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.value(v) for v in obj]
        return obj
