"""A toolkit's call policy (issue 20): its allow and deny rules, shown and changed.

The toolkit's owner (or an admin, or the operator) sets them; anyone else learns nothing (the
toolkit answers as absent, as its access settings do). A rule is for the whole toolkit, for
its tools of one ``kind``, or for one ``tool`` (its full name, or its action part); ``action``
(``allow``, ``approve`` or ``deny``) None removes the rule, so the less specific one decides
again. An ``approve`` rule names its ``approver`` (``owner``, ``admin`` or ``user``:
``gateway/admin/approvals.py``). Every change moves the policy
version. The rules themselves are ``access/policy.py``'s; the read-only flags of agents and
keys are set with the agent (``people.update_agent``) and the key (``keys.set_read_only``).

The data-flow guard's part (``access/dataflow.py``) is set here too, by the same people: a
toolkit's or one tool's ``labels`` (``private``, ``untrusted``, ``outward``; a tool's set
replaces the toolkit's; None removes it) and the toolkit's own guard setting (``dataflow``:
window, action, approver; None: the appliance's). Each change moves the policy version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appliance.access import dataflow, grants, policy
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
        return await _shown(rt, conn, slug, project, kit_id)


async def _shown(rt: Runtime, conn: Any, slug: str, project: str, kit_id: int) -> dict[str, Any]:
    """The toolkit's rules, labels and guard setting (``source``: its own or the appliance's)."""
    flow = await dataflow.toolkit_labels(conn, kit_id)
    guard = flow["guard"]
    if guard is None:
        s = rt.settings
        guard = {"window_s": int(s.dataflow_window_s), "action": s.dataflow_action, "approver": "owner"}
    return {
        "toolkit": slug,
        "project": project,
        **await policy.toolkit_rules(conn, kit_id),
        "labels": flow["labels"],
        "dataflow": {**guard, "source": "appliance" if flow["guard"] is None else "toolkit"},
    }


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
        name = await _tool_name(tx, kit_id, slug, tool)
        await policy.set_rule(tx, kit_id, tool_name=name, kind=level_kind, action=checked, approver=who)
        return await _shown(rt, tx, slug, project, kit_id)


async def _tool_name(tx: Any, kit_id: int, slug: str, tool: Any) -> str:
    """A tool of this toolkit by full name or action ("" for None: the toolkit itself)."""
    if tool is None:
        return ""
    if not isinstance(tool, str) or not tool or len(tool) > 256:
        raise InvalidParams("'tool' must be a tool name", field="tool")
    name = tool if tool.startswith(slug + SEPARATOR) else f"{slug}{SEPARATOR}{tool}"
    if not await policy.tool_in_toolkit(tx, kit_id, name):
        raise NotFound(f"toolkit {slug!r} has no tool {tool!r}", field="tool")
    return name


async def set_labels(
    rt: Runtime, actor: Principal, slug: str, project: str, *, labels: Any, tool: Any = None
) -> dict[str, Any]:
    """Label the toolkit, or one tool (its set replaces the toolkit's): a list of
    ``private``, ``untrusted``, ``outward`` (empty: none); None removes the row."""
    policy.require_unguarded(actor)
    project = check_project(project)
    checked = dataflow.check_labels(labels)
    async with rt.db.write() as tx:
        kit_id = await grants.find_toolkit(tx, actor, slug, project)
        name = await _tool_name(tx, kit_id, slug, tool)
        await dataflow.set_labels(tx, kit_id, name, checked)
        await policy.bump(tx)
        return await _shown(rt, tx, slug, project, kit_id)


async def set_guard(
    rt: Runtime, actor: Principal, slug: str, project: str, *, setting: Any
) -> dict[str, Any]:
    """The toolkit's own data-flow guard setting for its outward tools (``window_s``,
    ``action`` ``approve`` or ``deny``, ``approver`` with ``approve``); None: the appliance's."""
    policy.require_unguarded(actor)
    project = check_project(project)
    guard = dataflow.check_guard(setting, policy.check_approver)
    async with rt.db.write() as tx:
        kit_id = await grants.find_toolkit(tx, actor, slug, project)
        await dataflow.set_guard(tx, kit_id, guard)
        await policy.bump(tx)
        return await _shown(rt, tx, slug, project, kit_id)
