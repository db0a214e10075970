"""Quota windows: UTC days and UTC months, whatever the server's time zone says.

Pure functions of a unix timestamp. ``time.localtime`` never appears here: a server in
UTC+14 and one in UTC-9:30 must close a day at the same instant.
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


def day(at: float) -> Window:
    moment = datetime.fromtimestamp(at, tz=UTC)
    start = datetime(moment.year, moment.month, moment.day, tzinfo=UTC)
    end = start + timedelta(days=1)
    return Window("daily", f"d:{start:%Y-%m-%d}", start.timestamp(), end.timestamp())


def month(at: float) -> Window:
    moment = datetime.fromtimestamp(at, tz=UTC)
    start = datetime(moment.year, moment.month, 1, tzinfo=UTC)
    end = datetime(moment.year + moment.month // 12, moment.month % 12 + 1, 1, tzinfo=UTC)
    return Window("monthly", f"m:{start:%Y-%m}", start.timestamp(), end.timestamp())
