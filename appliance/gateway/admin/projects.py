"""Projects: listed by any user, added and removed by admins.

A project's slug follows the toolkit slug rules; its title is at most 200 characters (the
slug when none is given). ``default`` always exists: imports land there unless told otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appliance.access import principals
from appliance.catalogue import projects
from appliance.catalogue.naming import validate_slug
from appliance.errors import Conflict, InvalidParams
from appliance.models import Principal

if TYPE_CHECKING:  # the CLI imports these modules at start-up, the runtime only when it runs
    from appliance.gateway.runtime import Runtime

TITLE_MAX = 200


def check_project(value: Any) -> str:
    """The project an operation names: a non-empty string (its existence is the room's to say)."""
    if not isinstance(value, str) or not value:
        raise InvalidParams("'project' must be a non-empty string", field="project")
    return value


async def list_projects(rt: Runtime, actor: Principal) -> list[dict[str, Any]]:
    principals.require_person(actor)
    async with rt.db.read() as conn:
        return await projects.list_projects(conn)


async def create_project(rt: Runtime, actor: Principal, slug: Any, title: Any = None) -> dict[str, Any]:
    principals.require_admin(actor)
    if not isinstance(slug, str):
        raise InvalidParams("'slug' must be a string", field="slug")
    validate_slug(slug)
    title = slug if title is None else title
    if not isinstance(title, str) or len(title) > TITLE_MAX:
        raise InvalidParams(f"'title' must be a string of at most {TITLE_MAX} characters", field="title")
    async with rt.db.write() as tx:
        return await projects.create_project(tx, slug, title)


async def delete_project(rt: Runtime, actor: Principal, slug: str) -> None:
    """Only an empty project other than ``default``."""
    principals.require_admin(actor)
    if slug == "default":
        raise Conflict("the default project cannot be deleted", field="slug")
    async with rt.db.write() as tx:
        await projects.delete_project(tx, slug)
