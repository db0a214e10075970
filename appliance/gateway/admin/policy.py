"""A toolkit's call policy (issue 20): its allow and deny rules, shown and changed.

The toolkit's owner (or an admin, or the operator) sets them; anyone else learns nothing (the
toolkit answers as absent, as its access settings do). A rule is for the whole toolkit, for
its tools of one ``kind``, or for one ``tool`` (its full name, or its action part); ``action``
(``allow``, ``approve`` or ``deny``) None removes the rule, so the less specific one decides
again. An ``approve`` rule names its ``approver`` (``owner``, ``admin`` or ``user``:
``gateway/admin/approvals.py``). Every change moves the policy
version. The rules themselves are ``access/policy.py``'s; the read-only flags of agents and
keys are set with the agent (``people.update_agent``) and the key (``keys.set_read_only``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appliance.access import grants, policy
from appliance.catalogue.naming import SEPARATOR
from appliance.errors import InvalidParams, NotFound
from appliance.gateway.admin.projects import check_project
from appliance.models import Principal

if TYPE_CHECKING:  # the CLI imports these modules at start-up, the runtime only when it runs
    from appliance.gateway.runtime import Runtime


async def toolkit_policy(rt: Runtime, actor: Principal, slug: str, project: str) -> dict[str, Any]:
    project = check_project(project)
    async with rt.db.read() as conn:
        kit_id = await grants.find_toolkit(conn, actor, slug, project)
        return {"toolkit": slug, "project": project, **await policy.toolkit_rules(conn, kit_id)}


async def set_toolkit_policy(
    rt: Runtime,
    actor: Principal,
    slug: str,
    project: str,
    *,
    action: Any,
    tool: Any = None,
    kind: Any = None,
    approver: Any = None,
) -> dict[str, Any]:
    """Set one rule (``action`` ``allow``, ``approve`` or ``deny``) or remove it (None);
    answers the toolkit's rules and the new version."""
    policy.require_unguarded(actor)
    project = check_project(project)
    checked = policy.check_action(action)
    who = policy.check_approver(approver, checked)
    if tool is not None and kind is not None:
        raise InvalidParams("a rule is for one tool or for one kind of tool, not both", field="kind")
    if tool is not None and (not isinstance(tool, str) or not tool or len(tool) > 256):
        raise InvalidParams("'tool' must be a tool name", field="tool")
    level_kind = "" if kind is None else policy.check_kind(kind)
    async with rt.db.write() as tx:
        kit_id = await grants.find_toolkit(tx, actor, slug, project)
        name = ""
        if tool is not None:
            name = tool if tool.startswith(slug + SEPARATOR) else f"{slug}{SEPARATOR}{tool}"
            if not await policy.tool_in_toolkit(tx, kit_id, name):
                raise NotFound(f"toolkit {slug!r} has no tool {tool!r}", field="tool")
        await policy.set_rule(tx, kit_id, tool_name=name, kind=level_kind, action=checked, approver=who)
        return {"toolkit": slug, "project": project, **await policy.toolkit_rules(tx, kit_id)}
