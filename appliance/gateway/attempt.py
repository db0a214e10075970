"""One tool-call attempt: what was asked, and what each stage of the pipeline learned.

The pipeline (``gateway/pipeline.py``) hands one ``Attempt`` from stage to stage; nothing
about a call travels any other way (no context variable, no closure). Its record stage
turns it into the call's one audit row and, when the upstream was reached, its charge.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from appliance.gateway.credentials import PreparedCall
from appliance.ledger.book import Reservation
from appliance.models import CallResult, Principal, Tool
from appliance.protocol.relays import LogRelay, ProgressCallback


@dataclass(slots=True)
class Attempt:
    # -- what the caller asked -----------------------------------------------------------
    principal: Principal
    name: Any  # as the caller sent it; the audit row keeps it when no tool resolves
    arguments: dict[str, Any] = field(default_factory=dict)
    project: str | None = None
    runner: str | None = None  # the bridge runner it came through (None: called by name)
    on_progress: ProgressCallback | None = None
    on_log: LogRelay | None = None
    aside: bool = False  # a result over the threshold may be kept aside (read_result reaches it)
    approval: str | None = None  # the approval a retry names (``_meta`` or a runner's field)
    key: str | None = None  # the request's idempotency key: a retry with it may use its approval
    code_run: str | None = None  # the script run that made this call (use_code, run_code)
    at: float = field(default_factory=time.time)  # wall clock: the audit row's time
    started: float = field(default_factory=time.perf_counter)

    # -- what the stages learned, in the order they learn it -----------------------------
    tool: Tool | None = None  # resolve: the audit row names the tool from here on
    owner: bool = False  # reserve: the owner in person calls free and uncounted
    reservation: Reservation | None = None  # reserve: the fee held until charged or let go
    prepared: PreparedCall | None = None  # credential: opened for this call, and its redactor
    sent: bool = False  # dispatch: the upstream was (or may have been) contacted
    upstream_s: float = 0.0
    result: CallResult | None = None
    outcome: str = "ok"
    reason: str | None = None
    bytes: int = 0
    redacted: int = 0  # values replaced by [redacted] in the answer or the error
    consumed: str | None = None  # approval: the approval this call used up
    labels: frozenset[str] | None = None  # policy: the tool's data-flow labels (None: none)
    detail: str | None = None  # policy: the data-flow guard's reason, for the audit row
