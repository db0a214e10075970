"""Toolkits as their managers see them: every field of each one the actor may see.

The agent's view (``bridge.list_toolkits``: names to call) leaves out what only a manager
needs (the kind of source, the base URL, the tool count); this is the listing the CLI shows
and the console will. Visibility is the same rule as everywhere (``access/visibility.py``):
an admin and the operator see every toolkit, a user what is theirs, granted or published.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.access import principals, visibility
from appliance.catalogue import store
from appliance.db import SyncReader
from appliance.models import Principal, Toolkit

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime


async def list_toolkits(rt: Runtime, actor: Principal, *, project: str | None = None) -> list[Toolkit]:
    """The toolkits ``actor`` may see, in ``project`` if given, by project and slug."""
    principals.require_person(actor)

    def gather(r: SyncReader) -> list[Toolkit]:
        return store.list_toolkits_in(r, project=project, scope=visibility.scope_in(r, actor))

    async with rt.db.read() as conn:
        return await conn.batch(gather)
