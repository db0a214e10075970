"""Quota windows: UTC days and UTC months, whatever the server's time zone says.

Functions of a unix timestamp alone (the last window is remembered, never the clock).
``time.localtime`` never appears here: a server in UTC+14 and one in UTC-9:30 must close a
day at the same instant.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True)
class Window:
    name: str  # "daily" or "monthly"
    key: str  # "d:2026-11-29" or "m:2026-11"
    start: float  # unix seconds, inclusive
    end: float  # unix seconds, exclusive

    @property
    def resets_at(self) -> str:
        return rfc3339(self.end)


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# The window of the last call, reused while calls fall inside it: building one is datetime
# arithmetic and string formatting, twice per paid call (day and month).
_last: dict[str, Window] = {}


def _cached(name: str, at: float) -> Window | None:
    window = _last.get(name)
    return window if window is not None and window.start <= at < window.end else None


def day(at: float) -> Window:
    if (hit := _cached("daily", at)) is not None:
        return hit
    moment = datetime.fromtimestamp(at, tz=UTC)
    start = datetime(moment.year, moment.month, moment.day, tzinfo=UTC)
    end = start + timedelta(days=1)
    window = _last["daily"] = Window("daily", f"d:{start:%Y-%m-%d}", start.timestamp(), end.timestamp())
    return window


def month(at: float) -> Window:
    if (hit := _cached("monthly", at)) is not None:
        return hit
    moment = datetime.fromtimestamp(at, tz=UTC)
    start = datetime(moment.year, moment.month, 1, tzinfo=UTC)
    end = datetime(moment.year + moment.month // 12, moment.month % 12 + 1, 1, tzinfo=UTC)
    window = _last["monthly"] = Window("monthly", f"m:{start:%Y-%m}", start.timestamp(), end.timestamp())
    return window
