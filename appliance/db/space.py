"""Whether the database can take the writes a tool call's accounting needs, before the call leaves.

A paid call is charged and audited after its upstream answered: if that write fails, the
upstream has acted and nothing records it. With the data directory's disk full, that is
what happened to every call (each reached the upstream, then was answered
``storage_unavailable`` with no charge and no audit row) while ``/readyz`` said ready,
since its check wrote nothing. Two guards, both asked before anything is dispatched:

- **A floor of free space** (``min_free_disk_bytes``): below it, calls are refused before
  egress. It is a margin, not a measurement of one call's needs: the rows of the calls
  already in flight, the WAL's growth and a checkpoint must still fit once the floor is
  crossed, so the refusal has to come while there is room left, not when a write fails.
  ``statvfs`` (the space an unprivileged user may still take) costs a few µs, so it is
  asked again only every ``RECHECK_S`` while there is plenty (over ``COMFORTABLE`` floors:
  a disk that loses all of that within a quarter second is filling faster than any margin
  helps), and on every call near it; ``/readyz`` always looks afresh.
- **A write that failed** for any other reason than a held lock (``SQLITE_FULL`` despite
  the floor, an I/O error, a file system remounted read-only): from then on calls are
  refused until a real write succeeds again. The probe (``Database.probe_write``) commits
  a one-page change of the header (``PRAGMA user_version``, which toolspoke does not use
  otherwise), so it needs the same room in the WAL as any commit; the ledger's idle tick
  and ``/readyz`` run it, so service resumes by itself, without a restart, once the disk
  takes writes again.

The first guard sees a filling disk coming; the second only a failure that already
happened, so a disk that fails outright (EIO) can still fail the first call after it.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)

RECHECK_S = 0.25  # how stale a comfortable free-space figure may be
COMFORTABLE = 4  # free space above this many floors is "plenty"


class Storage:
    """The data directory's room for writes, as the call path asks before each dispatch."""

    def __init__(self, directory: Path, *, floor_bytes: int):
        self.directory = directory
        self.floor_bytes = floor_bytes
        self.failing: str | None = None  # why the last write failed, until a probe succeeds
        self._free = -1
        self._looked_at = -1e9

    def free_bytes(self) -> int:
        """What an unprivileged writer may still take on the data directory's file system."""
        try:
            st = os.statvfs(self.directory)
        except OSError as exc:
            log.warning("cannot stat the data directory's file system: %s", exc)
            return 0
        return int(st.f_bavail) * int(st.f_frsize)

    def problem(self, *, fresh: bool = False) -> str | None:
        """Why a call's accounting could not be made durable now; None when it can.
        ``fresh``: look at the free space now, whatever was seen a moment ago."""
        if self.failing is not None:
            return f"the database does not take writes ({self.failing})"
        now = time.monotonic()
        if fresh or self._free < COMFORTABLE * self.floor_bytes or now - self._looked_at > RECHECK_S:
            self._free, self._looked_at = self.free_bytes(), now
        if self._free < self.floor_bytes:
            return (
                f"the data directory's disk is nearly full ({self._free} bytes free, under the "
                f"{self.floor_bytes}-byte floor, setting min_free_disk_bytes)"
            )
        return None

    def failed(self, reason: str) -> None:
        if self.failing is None:
            log.error("database writes fail (%s): tool calls are refused until a write succeeds", reason)
        self.failing = reason
        self._looked_at = -1e9  # look at the free space afresh on the next ask

    def recovered(self) -> None:
        if self.failing is not None:
            log.warning("database writes succeed again: tool calls resume")
        self.failing = None
        self._looked_at = -1e9
