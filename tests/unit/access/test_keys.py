"""Keys (expiry, revocation, agents, preload) and the hourly import limit, in a real database."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from appliance import config
from appliance.access import keys, limits, principals
from appliance.errors import InvalidParams, KeyExpired, RateLimited, Unauthorized
from appliance.gateway.runtime import Runtime
from appliance.models import OPERATOR


def run(tmp_path: Path, body: Callable[[Runtime], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        rt = Runtime(config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path)}))
        await rt.open()
        try:
            return await asyncio.wait_for(body(rt), timeout=30)
        finally:
            await rt.close()

    return asyncio.run(main())


def test_a_revoked_key_answers_like_an_unknown_one_and_an_expired_key_says_so_to_its_holder(
    tmp_path: Path,
) -> None:
    """Revoked and unknown share one text (no oracle); an expired key is refused 401 with its
    own reason and the time, which only the holder of the right secret can learn."""

    async def body(rt: Runtime) -> None:
        async with rt.db.write() as tx:
            user = await principals.create_user(tx, "ann")
            past, _ = await keys.create_key(
                tx, user["id"], expires_at=keys.parse_expiry("2001-01-01T00:00:00Z")
            )
            future, _ = await keys.create_key(
                tx, user["id"], expires_at=keys.parse_expiry("2999-01-01T00:00:00+02:00")
            )
            revoked, info = await keys.create_key(tx, user["id"])
            await keys.revoke(tx, info["prefix"])
        messages = set()
        async with rt.db.read() as conn:
            assert (await keys.authenticate(conn, future)).name == "ann"
            for key in (revoked, keys.new_key(), past[:-4] + "AAAA"):
                with pytest.raises(Unauthorized) as refused:
                    await keys.authenticate(conn, key)
                assert refused.value.reason == "unauthorized"
                messages.add(refused.value.public_message)
            with pytest.raises(KeyExpired) as expired:
                await keys.authenticate(conn, past)
        assert len(messages) == 1
        assert expired.value.http_status == 401 and expired.value.reason == "key_expired"
        assert "expired at 2001-01-01T00:00:00.000Z" in expired.value.public_message
        for key in (past, past):  # remembered or not, the same answer
            with pytest.raises(KeyExpired):
                await keys.authenticate_cached(rt.db, key)

    run(tmp_path, body)


def test_an_agent_key_acts_for_its_user_as_the_agent_and_carries_its_preload(tmp_path: Path) -> None:
    async def body(rt: Runtime) -> None:
        async with rt.db.write() as tx:
            user = await principals.create_user(tx, "ann")
            agent = await principals.create_agent(tx, OPERATOR, "bot", user_id=user["id"], preload=["x__a"])
            agent_key, _ = await keys.create_key(tx, user["id"], agent_id=agent["id"])
            own_preload, _ = await keys.create_key(tx, user["id"], agent_id=agent["id"], preload=["y__b"])
        async with rt.db.read() as conn:
            who = await keys.authenticate(conn, agent_key)
            assert (who.user_id, who.agent_id, who.agent_name, who.preload) == (
                user["id"],
                agent["id"],
                "bot",
                ("x__a",),
            )
            assert (await keys.authenticate(conn, own_preload)).preload == ("y__b",)
            listed = await keys.list_keys(conn, agent_id=agent["id"])
            assert len(listed) == 2 and all("secret" not in str(k) and "hash" not in str(k) for k in listed)

    run(tmp_path, body)


@pytest.mark.parametrize("bad", ["tomorrow", "2030-01-01T00:00:00", 5, ""])
def test_an_expiry_must_be_an_rfc3339_time_with_a_zone(bad: Any) -> None:
    with pytest.raises(InvalidParams) as refused:
        keys.parse_expiry(bad)
    assert refused.value.field == "expires_at"


def test_the_import_limit_counts_a_sliding_hour_per_user_and_says_how_long_to_wait(tmp_path: Path) -> None:
    async def body(rt: Runtime) -> None:
        async with rt.db.write() as tx:
            ann = (await principals.create_user(tx, "ann"))["id"]
            bob = (await principals.create_user(tx, "bob"))["id"]
        for at in (1000.0, 1600.0):
            async with rt.db.write() as tx:
                await limits.record_import(tx, ann, per_hour=2, now=at)
        with pytest.raises(RateLimited) as refused:
            async with rt.db.write() as tx:
                await limits.record_import(tx, ann, per_hour=2, now=2000.0)
        assert refused.value.data["retry_after_s"] == 2600  # the first one leaves at 4600
        async with rt.db.write() as tx:
            await limits.record_import(tx, bob, per_hour=2, now=2000.0)  # others are not held back
            await limits.record_import(tx, ann, per_hour=2, now=4601.0)  # the oldest has left

    run(tmp_path, body)
