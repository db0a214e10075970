"""The settings page's operations (gateway/admin/settings.py): admins only; the semantic
switch is stored and reported; the vault's key versions come as numbers and states only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from appliance.errors import Forbidden, InvalidParams
from appliance.gateway.admin import settings
from appliance.gateway.runtime import Runtime
from tests.support import worlds
from tests.support.worlds import World


def test_the_switch_and_the_status_are_an_admins(tmp_path: Path) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Any]) -> None:
        admin, user = people
        for attempt in (settings.settings_page(rt, user), settings.switch_semantic(rt, user, False)):
            with pytest.raises(Forbidden):
                await attempt
        page = await settings.settings_page(rt, admin)
        assert page["semantic"]["enabled"] is True and 0.0 <= page["semantic"]["progress"] <= 1.0
        assert all(
            set(k) == {"version", "created_at", "retired_at", "live", "secrets"} for k in page["vault_keys"]
        )
        assert (await settings.switch_semantic(rt, admin, False))["enabled"] is False
        assert (await settings.settings_page(rt, admin))["semantic"]["enabled"] is False
        with pytest.raises(InvalidParams):
            await settings.switch_semantic(rt, admin, "off")

    worlds.run_in(tmp_path, World(users=[True, False], agents=[], kits=[]), body)
