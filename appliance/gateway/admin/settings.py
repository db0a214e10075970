"""The console's settings page (admins): semantic search on or off, how far the embedding
backfill has got, the vault's key versions (versions, states and counts; never key material).

The switch is the admin API's (``PUT /api/v1/search/semantic``): stored in the database, so
it takes effect on the next search of every process on this data directory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appliance.access import principals
from appliance.errors import InvalidParams
from appliance.gateway import semantic_admin
from appliance.gateway.admin import vault
from appliance.models import Principal

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime


async def settings_page(rt: Runtime, actor: Principal) -> dict[str, Any]:
    principals.require_admin(actor)
    semantic = await semantic_admin.status(rt)
    tools = semantic["tools"]
    semantic["progress"] = 1.0 if not tools else semantic["embedded"] / tools
    return {"semantic": semantic, "vault_keys": await vault.status(rt, actor)}


async def switch_semantic(rt: Runtime, actor: Principal, enabled: Any) -> dict[str, Any]:
    """Turn the semantic pass on or off; the status afterwards."""
    principals.require_admin(actor)
    if not isinstance(enabled, bool):
        raise InvalidParams("'enabled' must be true or false", field="enabled")
    await semantic_admin.switch(rt, enabled)
    return await semantic_admin.status(rt)
