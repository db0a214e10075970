"""API keys remembered between requests, and forgotten the moment the database changes.

A real database on disk; "another process" is a second ``Database`` on the same file (its
own connections, as the CLI beside a serving appliance has). A remembered key is proved
remembered by taking every reader away: a lookup would then wait forever.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from appliance.access import keys
from appliance.db import Database
from appliance.db.migrate import default_migrations_dir
from appliance.errors import Unauthorized

KEY = "tsk_aaaaaaaa-test-key-0123456789abcdefghijklmnop"
OTHER = "tsk_bbbbbbbb-test-key-0123456789abcdefghijklmnop"


def with_db(path: Path, body: Callable[[Database], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        db = Database(path)
        await db.open(default_migrations_dir())
        try:
            async with db.write() as tx:
                user = await keys.ensure_admin(tx)
                await keys.add_key(tx, user, KEY)
                await keys.add_key(tx, user, OTHER)
            async with asyncio.timeout(20):
                return await body(db)
        finally:
            await db.close()

    return asyncio.run(main())


@contextlib.asynccontextmanager
async def no_readers(db: Database) -> AsyncIterator[None]:
    """Hold every reader, so anything that needs one cannot proceed."""
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(2):
            await stack.enter_async_context(db.read())
        yield


async def fails(coro: Awaitable[Any]) -> Unauthorized:
    with pytest.raises(Unauthorized) as caught:
        await coro
    return caught.value


def test_a_key_is_remembered_so_the_next_request_needs_no_reader(tmp_path: Path) -> None:
    async def body(db: Database) -> None:
        first = await keys.authenticate_cached(db, KEY)
        async with no_readers(db):
            again = await asyncio.wait_for(keys.authenticate_cached(db, KEY), 2)
            assert again == first
            # A key never seen needs a reader: it is not answered from the memo.
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(keys.authenticate_cached(db, OTHER), 0.3)

    with_db(tmp_path / "t.db", body)


def test_a_key_revoked_by_another_process_fails_on_its_very_next_request(tmp_path: Path) -> None:
    async def body(db: Database) -> None:
        assert (await keys.authenticate_cached(db, KEY)).is_admin
        other = Database(tmp_path / "t.db")  # its own connections, like the CLI
        await other.open(default_migrations_dir())
        try:
            async with other.write() as tx:
                await tx.run("UPDATE api_keys SET revoked_at = 'now' WHERE prefix = ?", (KEY[:12],))
        finally:
            await other.close()
        error = await fails(keys.authenticate_cached(db, KEY))
        assert error.public_message == "invalid or missing API key"
        assert (await keys.authenticate_cached(db, OTHER)).is_admin  # the other key still works

    with_db(tmp_path / "t.db", body)


def test_a_key_revoked_through_this_process_fails_on_its_very_next_request(tmp_path: Path) -> None:
    async def body(db: Database) -> None:
        await keys.authenticate_cached(db, KEY)
        async with db.write() as tx:
            await tx.run("UPDATE api_keys SET revoked_at = 'now' WHERE prefix = ?", (KEY[:12],))
        await fails(keys.authenticate_cached(db, KEY))

    with_db(tmp_path / "t.db", body)


def test_a_remembered_key_stops_working_when_its_expiry_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body(db: Database) -> None:
        async with db.write() as tx:
            await tx.run(
                "UPDATE api_keys SET expires_at = '2999-01-01T00:00:00.000Z' WHERE prefix = ?", (KEY[:12],)
            )
        await keys.authenticate_cached(db, KEY)
        monkeypatch.setattr(keys, "_sqlite_now", lambda: "2999-01-01T00:00:00.001Z")
        async with no_readers(db):  # decided from the memo, without SQLite's clock
            await asyncio.wait_for(fails(keys.authenticate_cached(db, KEY)), 2)

    with_db(tmp_path / "t.db", body)


def test_python_now_compares_like_sqlite_now(tmp_path: Path) -> None:
    async def body(db: Database) -> None:
        before = keys._sqlite_now()
        async with db.read() as conn:
            row = await conn.one("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS now")
        after = keys._sqlite_now()
        assert len(before) == len(row["now"]) == 24
        assert before <= row["now"] <= after

    with_db(tmp_path / "t.db", body)


def test_wrong_and_malformed_keys_are_refused_alike_and_not_remembered(tmp_path: Path) -> None:
    async def body(db: Database) -> None:
        wrong = KEY[:12] + "x" * 40
        for key in (wrong, "not-a-key", "tsk_" + "y" * 300):
            error = await fails(keys.authenticate_cached(db, key))
            assert error.public_message == "invalid or missing API key"
        assert all(k[0] != "api_key" for k in db.memo() if isinstance(k, tuple))

    with_db(tmp_path / "t.db", body)
