"""The ``artifacts`` table: a kept result stored within its bounds, found by handle and owner.

Bounds, in the order ``keep_in`` applies them: expired rows go first (every store prunes
them, through their index); then the owner's oldest results make room for its newest (an
agent wants what it just fetched more than what it fetched an hour ago, and only its own
results are touched); then the appliance's total is checked, and a result that does not fit
is refused rather than evicting another owner's (one busy agent must not erase the results
its neighbours are still reading). Refused here means "not kept": the caller still gets the
head of its result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.db import Reader, Writer


@dataclass(frozen=True, slots=True)
class Limits:
    per_owner: int  # bytes one owner's kept results may hold together
    total: int  # bytes all kept results may hold together
    lifetime_s: float


@dataclass(frozen=True, slots=True)
class Kept:
    """One kept result's row, without its body."""

    handle: str
    owner: str
    toolkit_id: int
    tool_id: int
    tool: str
    bytes: int
    lines: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class NewArtifact:
    handle: str
    owner: str
    toolkit_id: int
    tool_id: int
    tool: str
    body: bytes
    lines: int


def prune_in(w: Writer, now: float) -> int:
    """Drop every expired result; how many went."""
    return len(w.all("DELETE FROM artifacts WHERE expires_at <= ? RETURNING 1", (now,)))


def keep_in(w: Writer, new: NewArtifact, now: float, limits: Limits) -> str | None:
    """Store ``new`` within the bounds (its owner's oldest evicted as needed). None when kept,
    else why not: ``too_large`` (over the owner's bound alone) or ``full`` (the appliance's)."""
    size = len(new.body)
    if size > limits.per_owner or size > limits.total:
        return "too_large"
    prune_in(w, now)
    owned = w.all(
        "SELECT handle, bytes FROM artifacts WHERE owner = ? ORDER BY created_at, handle", (new.owner,)
    )
    held = sum(row["bytes"] for row in owned)
    evict, freed = [], 0
    for row in owned:
        if held - freed + size <= limits.per_owner:
            break
        evict.append(row["handle"])
        freed += row["bytes"]
    total = w.one("SELECT coalesce(sum(bytes), 0) AS n FROM artifacts")["n"]
    if total - freed + size > limits.total:
        return "full"
    if evict:
        w.run_many("DELETE FROM artifacts WHERE handle = ?", [(h,) for h in evict])
    w.run(
        "INSERT INTO artifacts (handle, owner, toolkit_id, tool_id, tool, bytes, lines, body,"
        " created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            new.handle,
            new.owner,
            new.toolkit_id,
            new.tool_id,
            new.tool,
            size,
            new.lines,
            new.body,
            now,
            now + limits.lifetime_s,
        ),
    )
    return None


_ROW = "handle, owner, toolkit_id, tool_id, tool, bytes, lines, expires_at"


def _kept(row: Any) -> Kept:
    return Kept(*(row[k] for k in _ROW.split(", ")))


def find_in(r: Reader, handle: str, owner: str, now: float) -> Kept | None:
    """The owner's unexpired result under ``handle`` (None: no such result, whoever's it is)."""
    row = r.one(
        f"SELECT {_ROW} FROM artifacts WHERE handle = ? AND owner = ? AND expires_at > ?",
        (handle, owner, now),
    )
    return _kept(row) if row is not None else None


def slice_in(r: Reader, handle: str, start: int, length: int) -> bytes:
    """``length`` bytes of a result's body from byte ``start`` (0-based), read without the rest."""
    row = r.one(
        "SELECT substr(body, ?, ?) AS part FROM artifacts WHERE handle = ?", (start + 1, length, handle)
    )
    return bytes(row["part"]) if row is not None and row["part"] is not None else b""


def body_in(r: Reader, handle: str) -> bytes:
    row = r.one("SELECT body FROM artifacts WHERE handle = ?", (handle,))
    return bytes(row["body"]) if row is not None else b""


def usage_in(r: Reader) -> dict[str, int]:
    """How many results are kept and their bytes (for figures and tests)."""
    row = r.one("SELECT count(*) AS n, coalesce(sum(bytes), 0) AS b FROM artifacts")
    return {"results": row["n"], "bytes": row["b"]}
