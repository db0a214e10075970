"""The ledger's pure rules: UTC windows under any server zone, the GCRA limiter, strict amounts."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from appliance.errors import InvalidParams
from appliance.ledger import windows
from appliance.ledger.amounts import credits, parse_count, parse_credits
from appliance.ledger.ratelimit import RateLimiter

ZONES = ("KIR-14", "MAR+9:30")  # POSIX: UTC+14 (Kiritimati), UTC-9:30 (Marquesas)


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.fixture(params=ZONES)
def zone(request: pytest.FixtureRequest) -> Iterator[str]:
    before = os.environ.get("TZ")
    os.environ["TZ"] = request.param
    time.tzset()
    try:
        yield request.param
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_a_second_before_and_at_utc_midnight_fall_in_different_days_in_any_server_zone(zone: str) -> None:
    """LEDGER-02, RATE-04: quota days are UTC days."""
    # In both zones the two instants share a local date: a local-time window would merge them.
    assert (
        time.localtime(utc("2026-11-29T23:59:59")).tm_mday
        == time.localtime(utc("2026-11-30T00:00:00")).tm_mday
    )
    before, after = windows.day(utc("2026-11-29T23:59:59")), windows.day(utc("2026-11-30T00:00:00"))
    assert (before.key, after.key) == ("d:2026-11-29", "d:2026-11-30")
    assert before.resets_at == "2026-11-30T00:00:00Z"
    assert windows.month(utc("2026-11-29T23:59:59")).key == windows.month(utc("2026-11-30T00:00:00")).key


def test_the_remembered_window_never_answers_for_an_instant_outside_it() -> None:
    """The last window is reused while calls fall inside it; before or after it, a fresh one."""
    stamps = ["2026-11-30T12:00:00", "2026-11-30T23:59:59", "2026-12-01T00:00:00", "2026-11-29T08:00:00"]
    days = [windows.day(utc(s)).key for s in stamps]
    months = [windows.month(utc(s)).key for s in stamps]
    assert days == ["d:2026-11-30", "d:2026-11-30", "d:2026-12-01", "d:2026-11-29"]
    assert months == ["m:2026-11", "m:2026-11", "m:2026-12", "m:2026-11"]


def test_the_last_second_of_a_month_and_the_first_of_the_next_fall_in_different_months(zone: str) -> None:
    """LEDGER-02: quota months are UTC months."""
    for last, first in (
        ("2026-01-31T23:59:59", "2026-02-01T00:00:00"),
        ("2026-12-31T23:59:59", "2027-01-01T00:00:00"),
    ):
        a, b = windows.month(utc(last)), windows.month(utc(first))
        assert a.key != b.key
        assert a.end == b.start == utc(first)
        assert a.resets_at == first + "Z"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_full_bucket_admits_exactly_the_limit_then_names_the_wait_and_other_identities_are_unaffected() -> (
    None
):
    """RATE-01, RATE-03: the documented burst, the wait named, identities apart."""
    clock = Clock()
    limiter = RateLimiter(120, 60.0, clock=clock)
    assert [limiter.take("agent:1") for _ in range(120)] == [0.0] * 120
    assert limiter.take("agent:1") == pytest.approx(0.5)
    assert limiter.take("agent:2") == 0.0


def test_two_bursts_across_a_minute_boundary_are_not_both_admitted() -> None:
    """RATE-02: no double burst at a window edge."""
    clock = Clock()
    limiter = RateLimiter(120, 60.0, clock=clock)
    clock.now = 59.9 + 1000
    first = sum(limiter.take("a") == 0.0 for _ in range(120))
    clock.now = 60.1 + 1000
    second = sum(limiter.take("a") == 0.0 for _ in range(120))
    assert (first, second) == (120, 0)  # 0.2 s refills nothing whole: a fixed window would admit 240


def test_a_steady_two_calls_a_second_is_never_refused_and_a_faster_pace_is_trimmed_without_lockout() -> None:
    """RATE-02: steady state passes; a faster pace is trimmed, no lockout."""
    clock = Clock()
    limiter = RateLimiter(120, 60.0, clock=clock)
    refused = 0
    for _ in range(600):  # 5 minutes at 2.0/s
        clock.now += 0.5
        refused += limiter.take("a") > 0
    assert refused == 0
    admitted = 0
    for _ in range(2 * 660):  # 5 more minutes at 4.4/s: the bucket empties, then 2/s pass
        clock.now += 1 / 4.4
        admitted += limiter.take("a") == 0.0
    assert 120 + 2 * 300 - 2 <= admitted <= 120 + 2 * 300 + 2


def test_the_limiter_forgets_identities_whose_bucket_is_full_again_so_memory_stays_bounded() -> None:
    """RATE-03: limiter memory stays bounded."""
    import appliance.ledger.ratelimit as rl

    clock = Clock()
    limiter = RateLimiter(2, 1.0, clock=clock)
    old = rl.MAX_KEYS
    rl.MAX_KEYS = 10
    try:
        for i in range(50):
            clock.now += 1.0
            limiter.take(f"k{i}")
        assert len(limiter._tat) <= 11
    finally:
        rl.MAX_KEYS = old


@pytest.mark.parametrize(
    "raw",
    [math.nan, math.inf, -math.inf, -1, 1e-30, 1e309, "10", True, None, 2**63, 10**30, [], 0.0001],
    ids=repr,
)
def test_a_hostile_amount_is_refused_naming_the_field(raw: object) -> None:
    """LEDGER-09: NaN, infinities, negatives, tiny, huge, strings, booleans, null, lists."""
    with pytest.raises(InvalidParams) as err:
        parse_credits(raw, "fee")
    assert err.value.field == "fee"


def test_amounts_are_exact_millicredits_and_read_back_as_plain_numbers() -> None:
    """LEDGER-03: integers in minor units."""
    assert parse_credits(0.1, "fee") == 100
    assert sum(parse_credits(0.1, "fee") for _ in range(10)) == parse_credits(1.0, "limit")
    assert parse_credits(-2, "amount", allow_negative=True) == -2000
    assert (credits(1500), credits(2000), credits(100)) == (1.5, 2, 0.1)


@pytest.mark.parametrize("raw", [1.5, -1, True, "3", None, 10**13])
def test_a_ceiling_in_calls_must_be_a_whole_non_negative_number(raw: object) -> None:
    """LEDGER-09: hostile call ceilings."""
    with pytest.raises(InvalidParams) as err:
        parse_count(raw, "daily_limit")
    assert err.value.field == "daily_limit"


def test_the_rate_limiter_runs_on_the_monotonic_clock_so_wall_clock_steps_change_nothing() -> None:
    """RATE-04: a step of the wall clock neither locks anyone out nor refills a bucket."""
    import time

    assert RateLimiter(120, 60.0)._clock is time.monotonic
