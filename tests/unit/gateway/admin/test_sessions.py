"""Console sessions (gateway/admin/sessions.py over access/sessions.py), in a real database:
only a user's key signs in, only a hash is stored, the idle expiry is renewed while used and
the absolute cap is not, signing out or revoking the key ends it, the CSRF token is the
session's own."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from appliance import config
from appliance.access import keys, principals
from appliance.errors import Forbidden, Unauthorized
from appliance.gateway.admin import sessions
from appliance.gateway.runtime import Runtime
from appliance.models import OPERATOR

T0 = 1_900_000_000.0
ENV = {"TOOLSPOKE_CONSOLE_IDLE_MINUTES": "10", "TOOLSPOKE_CONSOLE_SESSION_HOURS": "1"}


def run(tmp_path: Path, body: Callable[[Runtime, dict[str, str]], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        rt = Runtime(config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path), **ENV}))
        await rt.open()
        try:
            async with rt.db.write() as tx:
                user = await principals.create_user(tx, "ann")
                agent = await principals.create_agent(tx, OPERATOR, "bot", user_id=user["id"])
                own, _ = await keys.create_key(tx, user["id"])
                other, _ = await keys.create_key(tx, user["id"])
                agent_key, _ = await keys.create_key(tx, user["id"], agent_id=agent["id"])
            found = {"own": own, "other": other, "agent": agent_key}
            return await asyncio.wait_for(body(rt, found), timeout=30)
        finally:
            await rt.close()

    return asyncio.run(main())


async def _rows(rt: Runtime) -> list[Any]:
    async with rt.db.read() as conn:
        return await conn.all("SELECT token_hash, created_at, seen_at FROM console_sessions")


def test_a_users_key_opens_a_session_of_which_only_the_hash_is_stored(tmp_path: Path) -> None:
    async def body(rt: Runtime, k: dict[str, str]) -> None:
        token, who = await sessions.sign_in(rt, k["own"], now=T0)
        assert who.name == "ann" and who.agent_id is None
        (row,) = await _rows(rt)
        assert row["token_hash"] == hashlib.sha256(token.encode()).hexdigest()
        assert token not in repr(list(row)) and k["own"] not in repr(list(row))
        assert (await sessions.resume(rt, token, now=T0 + 1)).name == "ann"

    run(tmp_path, body)


def test_an_agent_key_or_a_wrong_key_cannot_sign_in_and_opens_nothing(tmp_path: Path) -> None:
    async def body(rt: Runtime, k: dict[str, str]) -> None:
        with pytest.raises(Forbidden) as refused:
            await sessions.sign_in(rt, k["agent"], now=T0)
        assert refused.value.field == "key" and "agent" in refused.value.public_message
        for wrong in ("", "tsk_nope", k["own"][:-1] + "x", "x" * 5000):
            with pytest.raises(Unauthorized):
                await sessions.sign_in(rt, wrong, now=T0)
        assert await _rows(rt) == []

    run(tmp_path, body)


def test_use_renews_the_idle_expiry_but_never_past_the_absolute_cap(tmp_path: Path) -> None:
    async def body(rt: Runtime, k: dict[str, str]) -> None:
        token, _ = await sessions.sign_in(rt, k["own"], now=T0)
        # used every 9 minutes (idle expiry 10): alive for the whole hour
        at = T0
        while at + 540 <= T0 + 3600:
            at += 540
            assert (await sessions.resume(rt, token, now=at)).name == "ann"
        (row,) = await _rows(rt)
        assert row["seen_at"] == at and row["created_at"] == T0
        with pytest.raises(Unauthorized):
            await sessions.resume(rt, token, now=T0 + 3601)  # the cap, however fresh its use

    run(tmp_path, body)


def test_an_idle_session_ends_and_a_use_within_a_minute_writes_nothing(tmp_path: Path) -> None:
    async def body(rt: Runtime, k: dict[str, str]) -> None:
        token, _ = await sessions.sign_in(rt, k["own"], now=T0)
        await sessions.resume(rt, token, now=T0 + 30)
        assert (await _rows(rt))[0]["seen_at"] == T0  # not renewed: used within a minute
        with pytest.raises(Unauthorized):
            await sessions.resume(rt, token, now=T0 + 601)
        # the next sign-in prunes what has ended
        await sessions.sign_in(rt, k["other"], now=T0 + 700)
        assert len(await _rows(rt)) == 1

    run(tmp_path, body)


def test_signing_out_or_revoking_the_key_ends_the_session_at_once(tmp_path: Path) -> None:
    async def body(rt: Runtime, k: dict[str, str]) -> None:
        first, _ = await sessions.sign_in(rt, k["own"], now=T0)
        second, _ = await sessions.sign_in(rt, k["other"], now=T0)
        await sessions.sign_out(rt, first)
        with pytest.raises(Unauthorized):
            await sessions.resume(rt, first, now=T0 + 1)
        assert (await sessions.resume(rt, second, now=T0 + 1)).name == "ann"
        async with rt.db.write() as tx:
            await keys.revoke(tx, k["other"][: keys.PREFIX_LEN])
        with pytest.raises(Unauthorized):
            await sessions.resume(rt, second, now=T0 + 2)
        await sessions.sign_out(rt, "not-a-session")  # already out: nothing to end, no error

    run(tmp_path, body)


def test_an_unknown_or_oversized_token_is_refused_alike(tmp_path: Path) -> None:
    async def body(rt: Runtime, k: dict[str, str]) -> None:
        texts = set()
        for token in ("", "x", "é" * 10, "a" * 10_000):
            with pytest.raises(Unauthorized) as refused:
                await sessions.resume(rt, token, now=T0)
            texts.add(refused.value.public_message)
        assert len(texts) == 1

    run(tmp_path, body)


def test_the_csrf_token_is_the_sessions_own() -> None:
    one, two = "token-one", "token-two"
    assert sessions.csrf_matches(one, sessions.csrf_token(one))
    assert not sessions.csrf_matches(one, sessions.csrf_token(two))
    assert not sessions.csrf_matches(one, "")
    assert not sessions.csrf_matches(one, sessions.csrf_token(one)[:-1])
    assert not sessions.csrf_matches(one, "é" + sessions.csrf_token(one)[1:])
    assert sessions.csrf_token(one) != one and one not in sessions.csrf_token(one)
