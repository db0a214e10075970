"""Users as the console shows them (gateway/admin/user_pages.py), in a real database: the
list with balances is an admin's; a user's page is theirs or an admin's, and for anyone
else it is absent, like a user nobody has; a key of another user is not revoked from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from appliance.errors import Forbidden, NotFound
from appliance.gateway.admin import ledger, user_pages
from appliance.gateway.runtime import Runtime
from tests.support import worlds
from tests.support.worlds import World

WORLD = World(users=[True, False, False], agents=[1], kits=[])


def test_the_list_is_an_admins_and_a_page_is_its_users_or_an_admins(tmp_path: Path) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Any]) -> None:
        admin, u1, u2 = people[:3]
        await ledger.grant_credit(rt, admin, built.user_ids[1], 2.5, note="hello")
        rows = {r["name"]: r for r in (await user_pages.user_rows(rt, admin))["users"]}
        assert (rows["u1"]["balance"], rows["u1"]["agents"]) == (2.5, 1)
        assert rows["u2"]["balance"] == 0
        with pytest.raises(Forbidden):
            await user_pages.user_rows(rt, u1)
        own = await user_pages.user_page(rt, u1, built.user_ids[1])
        assert own["account"]["balance"] == 2.5 and [a["name"] for a in own["agents"]] == ["a0"]
        assert len(own["keys"]) == 2  # her own and her agent's
        assert own == await user_pages.user_page(rt, admin, built.user_ids[1])
        for other in (built.user_ids[2], built.user_ids[0], 10**30):
            with pytest.raises(NotFound):
                await user_pages.user_page(rt, u1, other)
        theirs = own["keys"][0]["prefix"]
        with pytest.raises(NotFound):
            await user_pages.revoke_user_key(rt, u2, built.user_ids[2], theirs)
        done = await user_pages.revoke_user_key(rt, admin, built.user_ids[1], theirs)
        assert done["revoked_at"]

    worlds.run_in(tmp_path, WORLD, body)
