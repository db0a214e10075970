"""Admin API for what may be seen and called: projects, toolkit access, grants.

Every route needs a user's key (an agent's key is refused: agents manage nothing). Admins
manage everything; a user manages their own grants and toolkits, and sees only those;
anything else answers 404 as if it did not exist. JSON in and out; errors are
``{"error": {reason, message, field}}``, naming the field at fault. Users, agents and keys:
``admin_people.py``. The rules are ``gateway/admin/projects.py``'s and ``grants.py``'s; this
module parses and answers.
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, Request

from appliance.errors import InvalidParams
from appliance.gateway.admin import approvals, grants, projects
from appliance.gateway.admin import policy as call_policy
from appliance.web.admin_fields import flag, only, positive_id, query_id
from appliance.web.admin_routes import actor as _actor
from appliance.web.admin_routes import answers, body, person_only
from appliance.web.admin_routes import project as _project

bp = Blueprint("admin_access", url_prefix="/api/v1")
bp.on_request(person_only)


# -- projects --------------------------------------------------------------------------------


@bp.get("/projects")
@answers()
async def list_projects(request: Request) -> Any:
    return {"projects": await projects.list_projects(request.app.ctx.rt, _actor(request))}


@bp.post("/projects")
@answers(201)
async def create_project(request: Request) -> Any:
    doc = body(request)
    only(doc, {"slug", "title"})
    return await projects.create_project(
        request.app.ctx.rt, _actor(request), doc.get("slug"), doc.get("title")
    )


@bp.delete("/projects/<slug:str>")
@answers()
async def delete_project(request: Request, slug: str) -> Any:
    await projects.delete_project(request.app.ctx.rt, _actor(request), slug)
    return {"deleted": slug}


# -- toolkit access --------------------------------------------------------------------------


@bp.get("/toolkits/<slug:str>/access")
@answers()
async def toolkit_access(request: Request, slug: str) -> Any:
    return await grants.toolkit_access(request.app.ctx.rt, _actor(request), slug, _project(request, {}))


@bp.patch("/toolkits/<slug:str>/access")
@answers()
async def set_toolkit_access(request: Request, slug: str) -> Any:
    doc = body(request)
    only(doc, {"project", "visibility", "default", "allowed_tools", "owner_id"})
    owner = doc.get("owner_id")
    if isinstance(owner, str):  # an id, never a name: names are the CLI's way to say who
        raise InvalidParams("'owner_id' must be a user id", field="owner_id")
    return await grants.set_toolkit_access(
        request.app.ctx.rt,
        _actor(request),
        slug,
        _project(request, doc),
        visibility=doc.get("visibility"),
        default=doc.get("default"),
        allowed_tools=doc.get("allowed_tools"),
        owner=owner,
    )


# -- call policy -----------------------------------------------------------------------------


@bp.get("/toolkits/<slug:str>/policy")
@answers()
async def toolkit_policy(request: Request, slug: str) -> Any:
    return await call_policy.toolkit_policy(request.app.ctx.rt, _actor(request), slug, _project(request, {}))


@bp.put("/toolkits/<slug:str>/policy")
@answers()
async def set_toolkit_policy(request: Request, slug: str) -> Any:
    """One change: a rule (``action``, for the toolkit, a ``kind`` or a ``tool``; null removes
    it), data-flow ``labels`` (for the toolkit or a ``tool``; null removes them), or the
    toolkit's data-flow guard setting (``dataflow``; null: the appliance's)."""
    doc = body(request)
    only(doc, {"project", "tool", "kind", "action", "approver", "labels", "dataflow"})
    rt, actor, project = request.app.ctx.rt, _actor(request), _project(request, doc)
    given = [name for name in ("action", "labels", "dataflow") if name in doc]
    if len(given) != 1:
        raise InvalidParams(
            "give one of 'action' (a rule: 'allow', 'approve', 'deny' or null), 'labels' (data-flow labels)"
            " or 'dataflow' (the data-flow guard's setting)",
            field="action",
        )
    if given == ["labels"]:
        only(doc, {"project", "tool", "labels"})
        return await call_policy.set_labels(
            rt, actor, slug, project, labels=doc["labels"], tool=doc.get("tool")
        )
    if given == ["dataflow"]:
        only(doc, {"project", "dataflow"})
        return await call_policy.set_guard(rt, actor, slug, project, setting=doc["dataflow"])
    return await call_policy.set_toolkit_policy(
        rt,
        actor,
        slug,
        project,
        action=doc["action"],
        tool=doc.get("tool"),
        kind=doc.get("kind"),
        approver=doc.get("approver"),
    )


# -- approvals -------------------------------------------------------------------------------


@bp.get("/approvals")
@answers()
async def list_approvals(request: Request) -> Any:
    """The calls waiting for the caller's yes (``state``: open, the default, or one state)."""
    rt, actor = request.app.ctx.rt, _actor(request)
    return await approvals.list_approvals(rt, actor, state=request.args.get("state"))


@bp.post("/approvals/<approval_id:str>/approve")
@answers()
async def approve_approval(request: Request, approval_id: str) -> Any:
    rt, actor = request.app.ctx.rt, _actor(request)
    return await approvals.decide(rt, actor, approval_id, approve=True)


@bp.post("/approvals/<approval_id:str>/deny")
@answers()
async def deny_approval(request: Request, approval_id: str) -> Any:
    rt, actor = request.app.ctx.rt, _actor(request)
    return await approvals.decide(rt, actor, approval_id, approve=False)


# -- grants ----------------------------------------------------------------------------------


@bp.get("/grants")
@answers()
async def list_grants(request: Request) -> Any:
    agent_id = query_id(request, "agent_id")
    return {"grants": await grants.list_grants(request.app.ctx.rt, _actor(request), agent_id=agent_id)}


@bp.post("/grants")
@answers(201)
async def create_grant(request: Request) -> Any:
    doc = body(request)
    only(doc, {"agent_id", "toolkit", "project", "tools", "enabled"})
    agent_id = positive_id(doc, "agent_id")
    if agent_id is None:
        raise InvalidParams("'agent_id' is required", field="agent_id")
    enabled = flag(doc, "enabled")
    return await grants.create_grant(
        request.app.ctx.rt,
        _actor(request),
        agent_id,
        doc.get("toolkit"),
        project=_project(request, doc),
        tools=doc.get("tools"),
        enabled=True if enabled is None else enabled,
    )


@bp.get("/grants/<grant_id:int>")
@answers()
async def get_grant(request: Request, grant_id: int) -> Any:
    return await grants.get_grant(request.app.ctx.rt, _actor(request), grant_id)


@bp.patch("/grants/<grant_id:int>")
@answers()
async def update_grant(request: Request, grant_id: int) -> Any:
    doc = body(request)
    only(doc, {"tools", "enabled"})
    return await grants.update_grant(
        request.app.ctx.rt, _actor(request), grant_id, tools=doc.get("tools"), enabled=flag(doc, "enabled")
    )


@bp.delete("/grants/<grant_id:int>")
@answers()
async def delete_grant(request: Request, grant_id: int) -> Any:
    await grants.delete_grant(request.app.ctx.rt, _actor(request), grant_id)
    return {"deleted": grant_id}
