"""``Secret``: a credential held in memory that no repr, log line or traceback can print.

It lives below every layer (like ``errors``) because settings, the vault, the gateway and
the upstream transport all hand secrets along; only the code that puts one on the wire
calls ``reveal()``.
"""

from __future__ import annotations

import hmac
from typing import Any, NoReturn

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
