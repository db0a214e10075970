"""Upstream health as a pure state machine: outcomes in, transitions out. No I/O here.

Probes (``gateway/health.py``) and real calls report *outcomes*; this module decides what
they mean, with hysteresis so that one bad answer never flips a toolkit::

    active ──k failures, or k slow answers in a row──▶ degraded ──n failures──▶ broken
      ▲                                                    │                      │
      └──────────────── m successes in a row ◀─────────────┴──────────────────────┘

    starting (a stdio child still cold-starting) ──first success──▶ active

Failures count consecutively: any answer resets the failure streak, any failure resets the
success streak. A slow answer proves the upstream is alive (it resets the failure streak)
but is not a success (it resets the success streak too), so a slow-but-working upstream
settles at ``degraded`` and a broken one that starts answering slowly climbs only to
``degraded``. A ``FATAL`` outcome (the SSRF guard refused the configured address: waiting
will not help) is ``broken`` at once. A cold start is not a failure: it neither counts
toward ``broken`` nor hides an earlier ``broken``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from appliance.config import Settings


class Health(enum.StrEnum):
    ACTIVE = "active"
    DEGRADED = "degraded"
    BROKEN = "broken"
    STARTING = "starting"


class Outcome(enum.StrEnum):
    OK = "ok"  # answered within the slow threshold
    SLOW = "slow"  # answered, but later than the slow threshold
    FAIL = "fail"  # no usable answer: refused, unreachable, timed out, crashed
    FATAL = "fatal"  # refused by policy (SSRF guard): retrying cannot help
    STARTING = "starting"  # a stdio child is cold-starting: no verdict yet


@dataclass(frozen=True)
class Thresholds:
    degraded_after: int = 2  # consecutive failures (or slow answers) before degraded
    broken_after: int = 4  # consecutive failures before broken
    recover_after: int = 2  # consecutive successes before active again
    slow_s: float = 5.0  # an answer later than this is slow

    def __post_init__(self) -> None:
        if min(self.degraded_after, self.broken_after, self.recover_after) < 1:
            raise ValueError("health thresholds must be at least 1")
        if self.broken_after < self.degraded_after:
            raise ValueError("broken_after must not be smaller than degraded_after")

    def classify(self, latency_s: float) -> Outcome:
        """The outcome of an answer that took ``latency_s``."""
        return Outcome.SLOW if latency_s > self.slow_s else Outcome.OK


def thresholds_from(settings: Settings) -> Thresholds:
    # A broken_after below degraded_after would skip degraded; read it as "equal".
    return Thresholds(
        degraded_after=settings.health_degraded_after,
        broken_after=max(settings.health_broken_after, settings.health_degraded_after),
        recover_after=settings.health_recover_after,
        slow_s=settings.health_slow_s,
    )


@dataclass(frozen=True)
class Transition:
    before: Health
    after: Health
    reason: str


@dataclass
class HealthState:
    """One toolkit's health and the streaks that drive it."""

    health: Health = Health.ACTIVE
    reason: str = ""
    fails: int = 0
    slows: int = 0
    oks: int = 0
    answers: int = 0  # ok or slow, consecutively

    def observe(self, outcome: Outcome, detail: str, limits: Thresholds) -> Transition | None:
        """Fold one outcome in; the transition it caused, if any."""
        if outcome is Outcome.OK:
            self.oks, self.answers, self.fails, self.slows = self.oks + 1, self.answers + 1, 0, 0
            if self.health is Health.STARTING:
                return self._move(Health.ACTIVE, "the server finished starting")
            if self.health is not Health.ACTIVE and self.oks >= limits.recover_after:
                return self._move(Health.ACTIVE, f"{self.oks} checks in a row succeeded")
            return None
        if outcome is Outcome.SLOW:
            self.slows, self.answers, self.fails, self.oks = self.slows + 1, self.answers + 1, 0, 0
            if self.health is Health.ACTIVE and self.slows >= limits.degraded_after:
                return self._move(Health.DEGRADED, f"{self.slows} slow answers in a row: {detail}")
            if self.health in (Health.BROKEN, Health.STARTING) and self.answers >= limits.recover_after:
                return self._move(Health.DEGRADED, f"answering again, but slowly: {detail}")
            return None
        if outcome is Outcome.STARTING:
            self.oks = self.answers = self.slows = 0
            if self.health is Health.BROKEN:
                return None  # a restart proves nothing yet: stay broken until it answers
            return self._move(Health.STARTING, detail or "the server is starting")
        self.oks = self.answers = self.slows = 0
        if outcome is Outcome.FATAL:
            self.fails = max(self.fails + 1, limits.broken_after)
            return self._move(Health.BROKEN, detail)
        self.fails += 1
        if self.fails >= limits.broken_after:
            return self._move(Health.BROKEN, f"{self.fails} checks in a row failed: {detail}")
        if self.fails >= limits.degraded_after and self.health in (Health.ACTIVE, Health.STARTING):
            return self._move(Health.DEGRADED, f"{self.fails} checks in a row failed: {detail}")
        return None

    def _move(self, to: Health, reason: str) -> Transition | None:
        if to is self.health:
            return None
        before, self.health, self.reason = self.health, to, reason
        return Transition(before, to, reason)


@dataclass
class HealthBook:
    """Every toolkit's state in this process, keyed by toolkit id.

    ``enforcing`` is set while probes run: only then may a broken toolkit refuse calls,
    because only probes can bring it back (a refused call proves nothing).
    """

    limits: Thresholds = field(default_factory=Thresholds)
    enforcing: bool = False
    _states: dict[int, HealthState] = field(default_factory=dict)

    def get(self, toolkit_id: int) -> HealthState | None:
        return self._states.get(toolkit_id)

    def seed(self, toolkit_id: int, health: str, reason: str) -> None:
        """Adopt a persisted state (after a restart) unless this process already has one."""
        if toolkit_id not in self._states:
            known = health if health in {h.value for h in Health} else Health.ACTIVE
            self._states[toolkit_id] = HealthState(Health(known), reason)

    def observe(self, toolkit_id: int, outcome: Outcome, detail: str = "") -> Transition | None:
        state = self._states.setdefault(toolkit_id, HealthState())
        return state.observe(outcome, detail, self.limits)

    def is_broken(self, toolkit_id: int) -> bool:
        state = self._states.get(toolkit_id)
        return self.enforcing and state is not None and state.health is Health.BROKEN

    def forget(self, toolkit_id: int) -> None:
        """A removed toolkit's state goes with it."""
        self._states.pop(toolkit_id, None)

    def keep_only(self, toolkit_ids: set[int]) -> None:
        """Forget deleted toolkits (removed by another process; ids are never reused)."""
        for gone in set(self._states) - toolkit_ids:
            del self._states[gone]
