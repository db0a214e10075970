"""Log levels of ``notifications/message`` and their order (logging.mdx "Log Levels").

A caller asks for the least severe level it wants (2025 era: ``logging/setLevel``; 2026-07-28:
the request's ``_meta`` logLevel); everything at or above it is relayed.
"""

from __future__ import annotations

from typing import Any

# RFC 5424 severities, least severe first.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
# Until a legacy session sets a level, everything is relayed.
DEFAULT_LEVEL = LOG_LEVELS[0]


def log_rank(level: Any) -> int:
    """A level's severity (-1: not a level)."""
    return LOG_LEVELS.index(level) if isinstance(level, str) and level in LOG_LEVELS else -1
