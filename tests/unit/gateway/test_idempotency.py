"""Idempotency keys on a real database: the atomic claim, the stored result, recovery, pruning."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from appliance.config import load
from appliance.db import Database
from appliance.db.migrate import default_migrations_dir
from appliance.errors import ConfigError, InvalidParams
from appliance.gateway import idempotency
from appliance.ledger import idempotency as store
from appliance.models import Principal

DAY = 86400.0


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


async def _opened(tmp: Path) -> Database:
    db = Database(tmp / "t.db")
    await db.open(default_migrations_dir())
    return db


async def _claim(db: Database, key: str, digest: str, now: float, prune_before: float | None = None) -> Any:
    async with db.write() as tx:
        return await tx.batch(lambda r: store.claim(r, "agent:1", key, digest, now, prune_before))


def test_of_twenty_concurrent_claims_of_one_key_exactly_one_wins(tmp_path: Path) -> None:
    """LEDGER-05: the claim is a unique insert, so concurrent duplicates never both run."""

    async def scenario() -> list[Any]:
        db = await _opened(tmp_path)
        try:
            return await asyncio.gather(*(_claim(db, "k", "h", 1.0) for _ in range(20)))
        finally:
            await db.close()

    held = run(scenario())
    assert held.count(None) == 1
    assert {(h.request_hash, h.state, h.result) for h in held if h is not None} == {("h", "running", None)}


def test_a_finished_key_hands_back_its_result_and_a_released_one_is_free_again(tmp_path: Path) -> None:
    async def scenario() -> tuple[Any, Any, Any]:
        db = await _opened(tmp_path)
        try:
            assert await _claim(db, "done", "h", 1.0) is None
            async with db.write() as tx:
                await tx.batch(lambda r: store.finish(r, "agent:1", "done", '{"x": 1}'))
            assert await _claim(db, "free", "h", 1.0) is None
            async with db.write() as tx:
                await tx.batch(lambda r: store.release(r, "agent:1", "free"))
            return await _claim(db, "done", "h", 2.0), await _claim(db, "free", "h", 2.0), None
        finally:
            await db.close()

    done, free, _ = run(scenario())
    assert (done.state, done.result) == ("done", '{"x": 1}')
    assert free is None  # released: the retry owns it now


def test_claims_left_running_by_a_killed_process_become_interrupted_results_at_start(tmp_path: Path) -> None:
    """LEDGER-06: no claim stays running forever; the call is not run a second time."""

    async def scenario() -> tuple[int, Any]:
        db = await _opened(tmp_path)
        try:
            await _claim(db, "cut", "h", 1.0)
            async with db.write() as tx:
                n = await tx.batch(lambda r: store.recover(r, "interrupted"))
            return n, await _claim(db, "cut", "h", 2.0)
        finally:
            await db.close()

    n, held = run(scenario())
    assert n == 1
    assert (held.state, held.result) == ("done", "interrupted")


def test_keys_older_than_the_retention_are_pruned_and_may_be_used_again(tmp_path: Path) -> None:
    """LEDGER-05: pruning after the retention window (at least 24 h)."""

    async def scenario() -> tuple[Any, Any]:
        db = await _opened(tmp_path)
        try:
            await _claim(db, "old", "h", 0.0)
            await _claim(db, "young", "h", DAY)
            # a day and an hour later, pruning what is older than a day
            again = await _claim(db, "old", "other", DAY + 3600, prune_before=3600)
            young = await _claim(db, "young", "other", DAY + 3600)
            return again, young
        finally:
            await db.close()

    again, young = run(scenario())
    assert again is None  # pruned, so a new call runs under it
    assert young is not None and young.request_hash == "h"


@pytest.mark.parametrize("raw", ["23.9", "0", "-24", "nan", "soon"])
def test_a_retention_below_24_hours_is_refused_naming_the_setting(raw: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load(env={"TOOLSPOKE_IDEMPOTENCY_RETENTION_H": raw, "TOOLSPOKE_DATA_DIR": "/tmp/x"})
    assert refused.value.field == "idempotency_retention_h"


def test_a_short_metrics_key_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigError) as refused:
        load(env={"TOOLSPOKE_METRICS_KEY": "short", "TOOLSPOKE_DATA_DIR": "/tmp/x"})
    assert refused.value.field == "metrics_key"


@pytest.mark.parametrize("raw", ["", 5, None, ["k"], "x" * 256, "line\nbreak"])
def test_a_malformed_idempotency_key_is_refused_naming_the_meta_field(raw: object) -> None:
    with pytest.raises(InvalidParams) as refused:
        idempotency.key_of({"_meta": {idempotency.META_KEY: raw}})
    assert refused.value.field == f"_meta.{idempotency.META_KEY}"


def test_a_request_without_a_key_has_none_and_the_hash_ignores_argument_order() -> None:
    assert idempotency.key_of({"name": "t"}) is None
    assert idempotency.key_of({"_meta": {"progressToken": 1}}) is None
    assert idempotency.request_hash("bridge", "t", {"a": 1, "b": 2}) == idempotency.request_hash(
        "bridge", "t", {"b": 2, "a": 1}
    )
    assert idempotency.request_hash("bridge", "t", {"a": 1}) != idempotency.request_hash(
        "toolkit:3", "t", {"a": 1}
    )


def test_keys_belong_to_the_agent_or_for_a_users_own_keys_to_the_user() -> None:
    agent = Principal(user_id=4, name="u", is_admin=False, key_prefix="tsk_a", agent_id=9)
    own = Principal(user_id=4, name="u", is_admin=False, key_prefix="tsk_b")
    other_own_key = Principal(user_id=4, name="u", is_admin=False, key_prefix="tsk_c")
    assert idempotency.scope_of(agent) == "agent:9"
    assert idempotency.scope_of(own) == idempotency.scope_of(other_own_key) == "user:4"
