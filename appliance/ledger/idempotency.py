"""The idempotency keys' SQL: claim (atomic), finish, release, recover, prune.

A claim is a unique insert inside the writer's ``BEGIN IMMEDIATE``: of two requests with one
key, exactly one inserts; the other reads the winner's row (running, or done with its result).
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.db.connection import SyncReader


@dataclass(frozen=True)
class Claimed:
    """The row another request already holds for this key."""

    request_hash: str
    state: str  # 'running' | 'done'
    result: str | None


def claim(
    r: SyncReader, scope: str, key: str, request_hash: str, now: float, prune_before: float | None
) -> Claimed | None:
    """None: this request now owns the key. Otherwise the row already there."""
    if prune_before is not None:
        prune(r, prune_before)
    won = r.all(
        "INSERT INTO idempotency_keys (scope, key, request_hash, state, created_at)"
        " VALUES (?, ?, ?, 'running', ?) ON CONFLICT DO NOTHING RETURNING 1",
        (scope, key, request_hash, now),
    )
    if won:
        return None
    row = r.one(
        "SELECT request_hash, state, result FROM idempotency_keys WHERE scope = ? AND key = ?",
        (scope, key),
    )
    return Claimed(row["request_hash"], row["state"], row["result"])


def finish(r: SyncReader, scope: str, key: str, result: str) -> None:
    r.all(
        "UPDATE idempotency_keys SET state = 'done', result = ? WHERE scope = ? AND key = ?",
        (result, scope, key),
    )


def release(r: SyncReader, scope: str, key: str) -> None:
    """The call was refused before anything left: the key is free for a retry."""
    r.all("DELETE FROM idempotency_keys WHERE scope = ? AND key = ? AND state = 'running'", (scope, key))


def recover(r: SyncReader, interrupted: str) -> int:
    """At start-up: claims left running by a killed process get ``interrupted`` as their result
    (the upstream may have acted; a retry must not run the call again)."""
    rows = r.all(
        "UPDATE idempotency_keys SET state = 'done', result = ? WHERE state = 'running' RETURNING 1",
        (interrupted,),
    )
    return len(rows)


def prune(r: SyncReader, before: float) -> int:
    return len(r.all("DELETE FROM idempotency_keys WHERE created_at < ? RETURNING 1", (before,)))
