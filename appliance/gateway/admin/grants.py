"""Grants of toolkits to agents, and each toolkit's access settings.

A grant is made by the agent's user (or an admin) on a toolkit that user reaches; a toolkit's
owner (or an admin) sets its visibility and allow-list, and only an admin makes it a platform
default or gives it to another owner (``access/grants.py`` holds those rules with the SQL).
A toolkit or grant the actor may not manage answers like one that does not exist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appliance.access import grants
from appliance.errors import InvalidParams
from appliance.gateway.admin.people import user_id
from appliance.gateway.admin.projects import check_project
from appliance.models import Principal

if TYPE_CHECKING:  # the CLI imports these modules at start-up, the runtime only when it runs
    from appliance.gateway.runtime import Runtime


async def managed_toolkit(rt: Runtime, actor: Principal, slug: str, project: str) -> int:
    """The id of a toolkit the actor owns (any, for an admin); anything else is not found."""
    async with rt.db.read() as conn:
        return await grants.find_toolkit(conn, actor, slug, check_project(project))


# -- toolkit access --------------------------------------------------------------------------


async def toolkit_access(rt: Runtime, actor: Principal, slug: str, project: str) -> dict[str, Any]:
    async with rt.db.read() as conn:
        kit_id = await grants.find_toolkit(conn, actor, slug, check_project(project))
        return await grants.toolkit_access(conn, kit_id)


async def set_toolkit_access(
    rt: Runtime,
    actor: Principal,
    slug: str,
    project: str,
    *,
    visibility: Any = None,
    default: Any = None,
    allowed_tools: Any = None,
    owner: Any = None,
) -> dict[str, Any]:
    """Change what is given (None: leave it); ``owner`` is a user id or, from the CLI, a name."""
    async with rt.db.write() as tx:
        kit_id = await grants.find_toolkit(tx, actor, slug, check_project(project))
        owner_id = await user_id(tx, owner) if isinstance(owner, str) else owner
        return await grants.set_toolkit_access(
            tx,
            actor,
            kit_id,
            visibility=visibility,
            default=default,
            allowed_tools=allowed_tools,
            owner_id=owner_id,
        )


# -- grants ----------------------------------------------------------------------------------


async def list_grants(rt: Runtime, actor: Principal, *, agent_id: int | None = None) -> list[dict[str, Any]]:
    async with rt.db.read() as conn:
        return await grants.list_grants(conn, actor, agent_id=agent_id)


async def create_grant(
    rt: Runtime,
    actor: Principal,
    agent_id: int,
    toolkit: Any,
    *,
    project: str = "default",
    tools: Any = None,
    enabled: Any = True,
) -> dict[str, Any]:
    """Grant ``toolkit`` (all of it, or only ``tools``) to an agent; ``enabled`` False opts the
    agent out of a platform default instead."""
    if not isinstance(toolkit, str) or not toolkit:
        raise InvalidParams("'toolkit' must be a toolkit slug", field="toolkit")
    project = check_project(project)
    async with rt.db.write() as tx:
        return await grants.create_grant(
            tx, actor, agent_id, toolkit, project=project, tools=tools, enabled=enabled
        )


async def get_grant(rt: Runtime, actor: Principal, grant_id: int) -> dict[str, Any]:
    async with rt.db.read() as conn:
        return await grants.get_grant(conn, actor, grant_id)


async def update_grant(
    rt: Runtime, actor: Principal, grant_id: int, *, tools: Any = None, enabled: Any = None
) -> dict[str, Any]:
    async with rt.db.write() as tx:
        return await grants.update_grant(tx, actor, grant_id, tools=tools, enabled=enabled)


async def delete_grant(rt: Runtime, actor: Principal, grant_id: int) -> None:
    async with rt.db.write() as tx:
        await grants.delete_grant(tx, actor, grant_id)
