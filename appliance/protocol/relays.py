"""What a tool call hands down to hear its upstream's progress and log messages.

Both sides meet here: the faces build these from the caller's request (its progress token,
its log level), the upstream session calls them as the server's notifications arrive.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

# Called with an upstream ``notifications/progress``'s params.
ProgressCallback: TypeAlias = Callable[[dict[str, Any]], Awaitable[None] | None]


@dataclass(frozen=True)
class LogRelay:
    """Where an upstream's ``notifications/message`` for one call go, and the least severe
    level wanted (a 2026-07-28 upstream is asked for exactly that level in ``_meta``)."""

    level: str
    deliver: Callable[[dict[str, Any]], Awaitable[None] | None]
