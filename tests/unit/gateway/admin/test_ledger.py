"""A toolkit's call history as its managers filter it (gateway/admin/ledger.toolkit_calls): the
filters' checks, each refused naming its field, before anything is read."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from appliance.errors import InvalidParams
from appliance.gateway.admin import ledger


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", None),
        (None, None),
        ("2026-12-02T10:00", "2026-12-02T10:00Z"),  # a browser's date-time field: UTC
        ("2026-12-02T10:00:05", "2026-12-02T10:00:05Z"),
        ("2026-12-02T10:00:00Z", "2026-12-02T10:00:00Z"),
        ("2026-12-02T10:00:00+02:00", "2026-12-02T10:00:00+02:00"),
        ("2026-12-02T10:00:00-02:00", "2026-12-02T10:00:00-02:00"),
        ("1764669600", "1764669600"),
    ],
)
def test_a_time_without_a_zone_is_utc(value: str | None, expected: str | None) -> None:
    assert ledger._history_time(value, "since") == expected


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"outcome": "<b>"}, "outcome"),
        ({"agent": "x1"}, "agent"),
        ({"agent": "1" * 19}, "agent"),
        ({"tool": "t" * 201}, "tool"),
        ({"tool": "a\nb"}, "tool"),
        ({"since": "é" * 3}, "since"),
        ({"until": "9" * 65}, "until"),
    ],
)
def test_a_bad_filter_is_refused_naming_it_before_anything_is_read(
    filters: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidParams) as refused:
        asyncio.run(ledger.toolkit_calls(None, None, "kit", "default", **filters))  # type: ignore[arg-type]
    assert refused.value.field == field
