"""The admin operations' rules of who may, in process on a temporary data directory.

``tests/web/test_admin_faces.py`` shows the CLI and the API agree; this file shows what the
operations themselves decide for callers other than the operator and the admin: a user, an
agent's key, and a second user, each of whom must find what is not theirs absent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from appliance import config
from appliance.errors import ApplianceError, Conflict, Forbidden, InvalidParams, NotFound
from appliance.gateway.admin import grants, keys, ledger, people, projects
from appliance.gateway.runtime import Runtime
from appliance.models import OPERATOR, Principal

T = TypeVar("T")


def _run(tmp_path: Path, fn: Callable[[Runtime], Awaitable[T]]) -> T:
    async def main() -> T:
        rt = Runtime(config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path), "TOOLSPOKE_DEMO": "0"}))
        await rt.open()
        try:
            return await fn(rt)
        finally:
            await rt.close()

    return asyncio.run(asyncio.wait_for(main(), timeout=60))


async def _person(rt: Runtime, name: str, *, admin: bool = False) -> Principal:
    made = await people.create_user(rt, OPERATOR, name, is_admin=admin)
    return Principal(user_id=made["id"], name=name, is_admin=admin, key_prefix=f"tsk_{name[:8]:_<8}")


async def _refused(work: Awaitable[object], kind: type[ApplianceError]) -> ApplianceError:
    with pytest.raises(kind) as caught:
        await work
    return caught.value


def test_only_admins_manage_users_and_projects_and_nobody_removes_or_demotes_themselves(
    tmp_path: Path,
) -> None:
    async def check(rt: Runtime) -> None:
        ann = await _person(rt, "ann", admin=True)
        bob = await _person(rt, "bob")
        await _refused(people.create_user(rt, bob, "eve"), Forbidden)
        await _refused(people.list_users(rt, bob), Forbidden)
        await _refused(projects.create_project(rt, bob, "team"), Forbidden)
        await _refused(people.get_user(rt, bob, ann.user_id), Forbidden)
        assert (await people.get_user(rt, bob, bob.user_id))["name"] == "bob"

        assert (await _refused(people.delete_user(rt, ann, ann.user_id), Conflict)).field == "user_id"
        await _refused(people.set_admin(rt, ann, ann.user_id, False), Conflict)
        assert (await people.set_admin(rt, ann, "bob", True))["is_admin"] is True
        assert [u["name"] for u in await people.list_users(rt, ann)] == ["ann", "bob"]  # nothing removed

    _run(tmp_path, check)


def test_an_agents_key_manages_nothing(tmp_path: Path) -> None:
    async def check(rt: Runtime) -> None:
        bob = await _person(rt, "bob")
        bot = await people.create_agent(rt, bob, "bot")
        as_bot = Principal(
            user_id=bob.user_id, name="bob", is_admin=False, key_prefix="tsk_bot_____", agent_id=bot["id"]
        )
        for work in (
            people.create_agent(rt, as_bot, "other"),
            keys.issue(rt, as_bot),
            keys.list_keys(rt, as_bot),
            grants.list_grants(rt, as_bot),
            projects.list_projects(rt, as_bot),
        ):
            await _refused(work, Forbidden)

    _run(tmp_path, check)


def test_a_user_finds_another_users_agents_and_keys_absent_and_learns_no_name(tmp_path: Path) -> None:
    async def check(rt: Runtime) -> None:
        bob = await _person(rt, "bob")
        cat = await _person(rt, "cat")
        cats_bot = await people.create_agent(rt, cat, "cats-bot")
        _, cats_key = await keys.issue(rt, cat, name="own")

        await _refused(people.get_agent(rt, bob, cats_bot["id"]), NotFound)
        await _refused(people.create_agent(rt, bob, "mine", user=cat.user_id), NotFound)
        absent = await _refused(keys.issue(rt, bob, user=cat.user_id), NotFound)
        assert absent.public_message == f"no user {cat.user_id}"  # as for a user that does not exist
        assert (await _refused(keys.issue(rt, bob, user=999), NotFound)).public_message == "no user 999"
        # Bob's own agent named with cat's id: not found, never "does not act for 'cat'".
        bobs_bot = await people.create_agent(rt, bob, "bobs-bot")
        refusal = await _refused(keys.issue(rt, bob, user=cat.user_id, agent_id=bobs_bot["id"]), NotFound)
        assert "cat" not in refusal.public_message
        await _refused(keys.revoke(rt, bob, cats_key["prefix"]), NotFound)
        assert [k["user"] for k in await keys.list_keys(rt, bob)] == []
        await _refused(keys.list_keys(rt, bob, user=cat.user_id), NotFound)
        assert await grants.list_grants(rt, bob) == []

    _run(tmp_path, check)


def test_a_key_is_issued_for_the_agents_user_and_its_own_key_is_not_revoked_by_itself(tmp_path: Path) -> None:
    async def check(rt: Runtime) -> None:
        bob = await _person(rt, "bob")
        bot = await people.create_agent(rt, bob, "bot")
        secret, listed = await keys.issue(rt, bob, agent_id=bot["id"], preload=["a", "a", "b"])
        assert secret.startswith("tsk_") and listed["user"] == "bob" and listed["agent"] == "bot"
        assert listed["preload"] == ["a", "b"]
        as_key = Principal(user_id=bob.user_id, name="bob", is_admin=False, key_prefix=listed["prefix"])
        await _refused(keys.revoke(rt, as_key, listed["prefix"]), Conflict)
        assert (await keys.revoke(rt, bob, listed["prefix"]))["revoked_at"]
        await _refused(keys.issue(rt, OPERATOR), InvalidParams)  # the operator names the user

    _run(tmp_path, check)


def test_credit_is_seen_by_its_user_and_set_by_admins_and_refused_before_any_lookup(tmp_path: Path) -> None:
    async def check(rt: Runtime) -> None:
        ann = await _person(rt, "ann", admin=True)
        bob = await _person(rt, "bob")
        await ledger.grant_credit(rt, ann, bob.user_id, 3)
        assert (await ledger.account(rt, bob, bob.user_id))["balance"] == 3
        assert (await ledger.account(rt, OPERATOR, "bob"))["balance"] == 3
        await _refused(ledger.account(rt, bob, ann.user_id), Forbidden)
        await _refused(ledger.account(rt, bob, 999), Forbidden)  # not "no user 999": nothing to learn
        await _refused(ledger.grant_credit(rt, bob, bob.user_id, 3), Forbidden)
        entries = (await ledger.account(rt, ann, bob.user_id))["entries"]
        assert [e["amount"] for e in entries] == [3]

    _run(tmp_path, check)


def test_a_project_title_and_name_are_checked_before_anything_is_written(tmp_path: Path) -> None:
    async def check(rt: Runtime) -> None:
        assert (
            await _refused(projects.create_project(rt, OPERATOR, "team", "t" * 201), InvalidParams)
        ).field == "title"
        await _refused(projects.create_project(rt, OPERATOR, 7), InvalidParams)
        await _refused(grants.toolkit_access(rt, OPERATOR, "x", ""), InvalidParams)
        made = await projects.create_project(rt, OPERATOR, "team", "t" * 200)
        assert made["title"] == "t" * 200
        assert (await projects.create_project(rt, OPERATOR, "solo"))["title"] == "solo"
        assert [p["slug"] for p in await projects.list_projects(rt, OPERATOR)] == ["default", "solo", "team"]
        await projects.delete_project(rt, OPERATOR, "solo")
        await _refused(projects.delete_project(rt, OPERATOR, "solo"), NotFound)

    _run(tmp_path, check)


def test_the_vault_keys_are_an_admins_and_a_bad_batch_is_refused_before_any_rotation(tmp_path: Path) -> None:
    from appliance.gateway.admin import vault

    async def check(rt: Runtime) -> None:
        bob = await _person(rt, "bob")
        ann = await _person(rt, "ann", admin=True)
        for work in (
            vault.status(rt, bob),
            vault.rotate(rt, bob),
            vault.retire(rt, bob, 1),
            vault.rekey(rt, bob),
        ):
            await _refused(work, Forbidden)
        before = await vault.status(rt, ann)
        for batch in (0, -1, True, "5", vault.BATCH_MAX + 1):
            refused = await _refused(vault.rotate(rt, ann, batch=batch), InvalidParams)  # type: ignore[arg-type]
            assert refused.field == "batch"
        assert await vault.status(rt, ann) == before  # no version was made by a refused rotation
        report = await vault.rotate(rt, ann, batch=10)
        versions = await vault.status(rt, ann)
        assert report["version"] in [v["version"] for v in versions]
        assert not any("wrapped" in v or "key" in v for v in versions)  # counts and states, never material

    _run(tmp_path, check)


def test_a_refused_restore_into_a_new_directory_leaves_no_trace(tmp_path: Path) -> None:
    from appliance.gateway.data_dir import restore_from

    bogus = tmp_path / "not-a-backup.db"
    bogus.write_bytes(b"this is not an SQLite file")
    fresh = tmp_path / "fresh"
    settings = config.load(env={"TOOLSPOKE_DATA_DIR": str(fresh), "TOOLSPOKE_DEMO": "0"})
    with pytest.raises(ApplianceError) as caught:
        restore_from(settings, bogus)
    assert caught.value.field == "backup"
    assert not fresh.exists()
