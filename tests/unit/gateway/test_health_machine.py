"""The upstream health state machine: scripted outcomes in, states out (no I/O, no clock)."""

from __future__ import annotations

import pytest

from appliance.gateway.health_machine import Health, HealthBook, HealthState, Outcome, Thresholds

OK, SLOW, FAIL, FATAL, STARTING = Outcome.OK, Outcome.SLOW, Outcome.FAIL, Outcome.FATAL, Outcome.STARTING
LIMITS = Thresholds(degraded_after=2, broken_after=4, recover_after=2, slow_s=5.0)


def states(outcomes: list[Outcome], start: Health = Health.ACTIVE) -> list[Health]:
    state = HealthState(start)
    seen = []
    for outcome in outcomes:
        state.observe(outcome, "detail", LIMITS)
        seen.append(state.health)
    return seen


def test_one_failure_changes_nothing_and_k_failures_make_degraded_then_n_broken() -> None:
    """UP-11: k failures make degraded, n make broken."""
    A, D, B = Health.ACTIVE, Health.DEGRADED, Health.BROKEN
    assert states([FAIL, FAIL, FAIL, FAIL, FAIL]) == [A, D, D, B, B]


def test_broken_comes_back_only_after_m_successes_in_a_row() -> None:
    """UP-11: back to active only after m successes in a row."""
    B, A = Health.BROKEN, Health.ACTIVE
    assert states([OK, FAIL, OK, OK], start=B) == [B, B, B, A]


def test_alternating_outcomes_never_flap() -> None:
    """UP-11: hysteresis; alternating outcomes never flap."""
    flapping = [FAIL, OK] * 10
    assert set(states(flapping)) == {Health.ACTIVE}
    assert set(states(flapping, start=Health.DEGRADED)) == {Health.DEGRADED}


def test_one_slow_answer_does_not_flip_state_but_slow_answers_in_a_row_degrade() -> None:
    """UP-11: latency over the threshold degrades."""
    A, D = Health.ACTIVE, Health.DEGRADED
    assert states([SLOW, OK, SLOW, OK]) == [A, A, A, A]
    assert states([SLOW, SLOW, SLOW]) == [A, D, D]


def test_a_slow_answer_is_alive_but_not_a_recovery() -> None:
    # Slow answers reset the failure streak (no broken) and the success streak (no active).
    assert Health.BROKEN not in states([FAIL, FAIL, FAIL, SLOW, FAIL, FAIL, FAIL])
    assert states([SLOW, SLOW, SLOW], start=Health.DEGRADED) == [Health.DEGRADED] * 3
    assert states([SLOW, SLOW], start=Health.BROKEN) == [Health.BROKEN, Health.DEGRADED]
    assert states([SLOW, OK, OK], start=Health.DEGRADED)[-1] is Health.ACTIVE


def test_a_cold_start_is_starting_not_broken_and_its_first_answer_makes_it_active() -> None:
    S, A = Health.STARTING, Health.ACTIVE
    assert states([STARTING, STARTING, STARTING, OK]) == [S, S, S, A]


def test_a_cold_start_neither_counts_as_a_failure_nor_hides_broken() -> None:
    assert states([FAIL, STARTING, FAIL])[-1] is Health.DEGRADED  # streak survives the start
    assert states([STARTING, OK], start=Health.BROKEN) == [Health.BROKEN, Health.BROKEN]


def test_a_start_that_fails_counts_like_any_failure() -> None:
    assert states([STARTING, FAIL, FAIL, FAIL, FAIL])[-1] is Health.BROKEN


def test_a_policy_refusal_is_broken_at_once_and_recovers_like_any_broken() -> None:
    """UP-11: an SSRF-blocked or undecryptable configuration is broken at once."""
    assert states([FATAL, OK, OK]) == [Health.BROKEN, Health.BROKEN, Health.ACTIVE]


def test_transitions_carry_before_after_and_a_reason() -> None:
    """UP-11: transitions carry a reason."""
    state = HealthState()
    assert state.observe(FAIL, "connection refused", LIMITS) is None
    moved = state.observe(FAIL, "connection refused", LIMITS)
    assert moved is not None
    assert (moved.before, moved.after) == (Health.ACTIVE, Health.DEGRADED)
    assert "2 checks in a row failed" in moved.reason and "connection refused" in moved.reason
    assert state.reason == moved.reason


def test_answers_are_slow_only_past_the_threshold() -> None:
    assert LIMITS.classify(5.0) is OK
    assert LIMITS.classify(5.01) is SLOW


@pytest.mark.parametrize(
    "kwargs", [{"degraded_after": 0}, {"recover_after": 0}, {"degraded_after": 3, "broken_after": 2}]
)
def test_nonsense_thresholds_are_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        Thresholds(**kwargs)


def test_the_book_refuses_only_while_enforcing_and_adopts_persisted_states_once() -> None:
    book = HealthBook(LIMITS)
    book.seed(7, "broken", "stored reason")
    assert book.is_broken(7) is False  # probes not running: never refuse
    book.enforcing = True
    assert book.is_broken(7) is True
    book.seed(7, "active", "")  # an existing state is not overwritten by a stale row
    assert book.get(7) is not None and book.get(7).reason == "stored reason"  # type: ignore[union-attr]
    book.observe(7, OK)
    book.observe(7, OK)
    assert book.is_broken(7) is False
    book.seed(8, "nonsense", "")
    assert book.get(8) is not None and book.get(8).health is Health.ACTIVE  # type: ignore[union-attr]
    book.keep_only({8})
    assert book.get(7) is None
