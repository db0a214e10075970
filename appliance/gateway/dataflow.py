"""The data-flow guard in the gateway (issue 20, item 7): each agent's recent-call marks.

A prompt injection in fetched content must not quietly exfiltrate what the agent read. So
after a call of a tool labelled ``private`` or ``untrusted`` (``access/dataflow.py``) that the
upstream answered, the caller's marks note the label, the time and the tool; when both marks
are within the window of an ``outward`` tool's toolkit, the policy stage
(``gateway/policy.check``) holds that call: a person's approval through the approval stage
(``gateway/approvals.py``, with the guard's reason on the approval), or a refusal.

- **Whose marks**: the calling agent's (any of its keys), else the key's (a user's own key),
  else the operator's. Another agent's calls never count.
- **What taints**: a call the upstream answered (its answer, an ``isError`` one included,
  reached the agent). A call refused on the way, or whose upstream failed or could not be
  reached, brought nothing in and marks nothing.
- **In memory, per process**: the marks are not stored (the allow path gains no database
  hop); a restart forgets them, and ``toolspoke call`` in its own process has its own. The
  guard therefore holds what one ``serve`` saw, which is where agents call.

An allowed call of an unlabelled tool costs one test in the policy stage (no label anywhere)
or two dict lookups, and one attribute test after dispatch.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from appliance.access.dataflow import MAX_WINDOW_S, Flow, Guard, Mark, tripped
from appliance.models import Principal

_PRUNE_FROM = 4096  # entries before the first sweep of stale ones


def whose(principal: Principal) -> str:
    """The marks' owner: the agent, else the key, else the operator."""
    if principal.operator:
        return "operator"
    if principal.agent_id is not None:
        return f"agent:{principal.agent_id}"
    return f"key:{principal.key_prefix}" if principal.key_prefix else f"user:{principal.user_id}"


class Taints:
    """Per caller, the latest ``private`` and ``untrusted`` mark (monotonic time and tool)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._now = clock
        self._marks: dict[str, tuple[Mark | None, Mark | None]] = {}
        self._prune_at = _PRUNE_FROM

    def now(self) -> float:
        return self._now()

    def mark(self, principal: Principal, labels: frozenset[str], tool: str) -> None:
        """A call of a tool with these labels was answered."""
        private, untrusted = "private" in labels, "untrusted" in labels
        if not (private or untrusted):
            return
        who, now = whose(principal), self._now()
        old_p, old_u = self._marks.get(who, (None, None))
        self._marks[who] = (
            Mark(now, tool) if private else old_p,
            Mark(now, tool) if untrusted else old_u,
        )
        if len(self._marks) > self._prune_at:
            self._prune(now)

    def flow(self, principal: Principal, guard: Guard) -> Flow | None:
        """Whether this caller's marks hold an outward call under ``guard``."""
        found = self._marks.get(whose(principal))
        if found is None:
            return None
        return tripped(found[0], found[1], guard, self._now())

    def clear(self) -> None:
        self._marks.clear()

    def _prune(self, now: float) -> None:
        """Marks older than any window can hold are forgotten (amortised: the next sweep waits
        until the table has doubled)."""
        since = now - MAX_WINDOW_S
        self._marks = {
            who: (p, u)
            for who, (p, u) in self._marks.items()
            if (p is not None and p.at >= since) or (u is not None and u.at >= since)
        }
        self._prune_at = max(_PRUNE_FROM, 2 * len(self._marks))

    def __len__(self) -> int:
        return len(self._marks)
