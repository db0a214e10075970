"""The managers' catalogue (gateway/admin/catalogue.py over catalogue/toolkit_pages.py), in a
real database: a user's cards are their own toolkits (never another's, published or not), an
admin's every one; filters, text and pages narrow them; a filter out of bounds is refused
naming its field; another's toolkit has no detail and no approval, and nothing changes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from appliance import config
from appliance.errors import Forbidden, InvalidParams, NotFound
from appliance.gateway.admin import catalogue
from appliance.gateway.runtime import Runtime
from tests.support import worlds
from tests.support.worlds import KitSpec, World

WORLD = World(
    users=[True, False, False],  # u0 admin, u1 and u2 users
    agents=[1],
    kits=[
        KitSpec("alpha", "default", owner=1, active=[True, True, False]),
        KitSpec("beta", "default", owner=1, visibility="published", active=[True]),
        KitSpec("gamma", "ops", owner=2, visibility="published", active=[False, False]),
        KitSpec("delta_kit", "ops", owner=None, default=True, active=[True]),
        *[KitSpec(f"many{i:02d}", "bulk", owner=2) for i in range(30)],
    ],
)


def run(tmp_path: Path, body: Callable[[Runtime, list[Any]], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        env = {"TOOLSPOKE_DATA_DIR": str(tmp_path), "TOOLSPOKE_DEMO": "0"}
        rt = Runtime(config.load(env=env))
        await rt.open()
        try:
            built = await worlds.build(rt, WORLD)
            people = [await worlds.principal(rt, key) for key in built.user_keys + built.agent_keys]
            return await asyncio.wait_for(body(rt, people), timeout=30)
        finally:
            await rt.close()

    return asyncio.run(main())


def _slugs(page: dict[str, Any]) -> list[str]:
    return [card["slug"] for card in page["cards"]]


def test_a_user_sees_the_cards_of_their_own_toolkits_and_an_admin_every_one(tmp_path: Path) -> None:
    async def body(rt: Runtime, people: list[Any]) -> None:
        admin, ann, bob, bot = people
        mine = await catalogue.toolkit_cards(rt, ann)
        assert _slugs(mine) == ["alpha", "beta"] and mine["total"] == 2
        assert mine["projects"] == ["default"]  # not even the names of projects she has nothing in
        alpha = mine["cards"][0]
        assert (alpha["tools"], alpha["pending"], alpha["type"], alpha["health"]) == (
            2,
            1,
            "catalog",
            "active",
        )
        every = await catalogue.toolkit_cards(rt, admin, per_page=1000)
        assert every["total"] == len(WORLD.kits)
        assert {c["slug"] for c in every["cards"]} == {k.slug for k in WORLD.kits}
        bobs = await catalogue.toolkit_cards(rt, bob, per_page=1000)
        assert "alpha" not in _slugs(bobs) and "beta" not in _slugs(bobs) and "delta_kit" not in _slugs(bobs)
        with pytest.raises(Forbidden):
            await catalogue.toolkit_cards(rt, bot)  # an agent manages nothing

    run(tmp_path, body)


def test_filters_text_and_pages_narrow_the_cards(tmp_path: Path) -> None:
    async def body(rt: Runtime, people: list[Any]) -> None:
        admin = people[0]
        assert _slugs(await catalogue.toolkit_cards(rt, admin, project="ops")) == ["delta_kit", "gamma"]
        assert _slugs(await catalogue.toolkit_cards(rt, admin, q="ALPH")) == ["alpha"]
        # LIKE's own characters are text: "_" matches an underscore, not any character
        assert _slugs(await catalogue.toolkit_cards(rt, admin, q="a_k")) == ["delta_kit"]
        assert _slugs(await catalogue.toolkit_cards(rt, admin, q="%")) == []
        assert (await catalogue.toolkit_cards(rt, admin, type="openapi"))["total"] == 0
        assert (await catalogue.toolkit_cards(rt, admin, health="active"))["total"] == len(WORLD.kits)
        first = await catalogue.toolkit_cards(rt, admin, project="bulk", page="1", per_page=24)
        second = await catalogue.toolkit_cards(rt, admin, project="bulk", page=2, per_page=24)
        assert (first["pages"], len(first["cards"]), len(second["cards"])) == (2, 24, 6)
        assert not set(_slugs(first)) & set(_slugs(second))
        beyond = await catalogue.toolkit_cards(rt, admin, project="bulk", page=9)
        assert beyond["cards"] == [] and beyond["total"] == 30

    run(tmp_path, body)


@pytest.mark.parametrize(
    ("option", "value", "field"),
    [
        ("type", "soap", "type"),
        ("health", "dead", "health"),
        ("page", "0", "page"),
        ("page", "-1", "page"),
        ("page", "1e3", "page"),
        ("page", "9" * 50, "page"),
        ("q", "x" * 201, "q"),
        ("q", "a\x00b", "q"),
    ],
)
def test_a_filter_out_of_bounds_is_refused_naming_its_field(
    tmp_path: Path, option: str, value: str, field: str
) -> None:
    async def body(rt: Runtime, people: list[Any]) -> None:
        with pytest.raises(InvalidParams) as refused:
            await catalogue.toolkit_cards(rt, people[0], **{option: value})
        assert refused.value.field == field

    run(tmp_path, body)


def test_another_users_toolkit_has_no_detail_and_no_approval(tmp_path: Path) -> None:
    async def body(rt: Runtime, people: list[Any]) -> None:
        admin, ann, bob, _ = people
        detail = await catalogue.toolkit_detail(rt, ann, "alpha", "default")
        assert [t["state"] for t in detail["tools"]] == ["pending", "active", "active"]
        assert detail["tools"][0]["runner"] == "use_tool"
        for slug, project in (("gamma", "ops"), ("delta_kit", "ops"), ("nope", "default")):
            with pytest.raises(NotFound) as hidden:
                await catalogue.toolkit_detail(rt, ann, slug, project)
            assert hidden.value.field == "toolkit"
        with pytest.raises(NotFound):
            await catalogue.approve_tools(rt, ann, "gamma", "ops", None)
        assert (await catalogue.toolkit_detail(rt, bob, "gamma", "ops"))["toolkit"]["pending"] == 2
        approved = await catalogue.approve_tools(rt, bob, "gamma", "ops", ["gamma__t1"])
        assert approved["approved"] == ["gamma__t1"]
        after = (await catalogue.toolkit_detail(rt, admin, "gamma", "ops"))["toolkit"]
        assert (after["tools"], after["pending"]) == (1, 1)

    run(tmp_path, body)
