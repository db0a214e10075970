"""Admin API for re-sync, approval and reclassification, and the re-sync scheduler's lifecycle.

Routes (a user's key: the toolkit's owner or an admin; reclassifying: an admin;
``project`` from the query string or the body, default ``default``):

- ``POST /api/v1/toolkits/<slug>/sync``: list the upstream's tools now and apply the plan
- ``GET  /api/v1/toolkits/<slug>/pending``: tools awaiting approval, full definitions, the
  screening's reasons and, for a changed tool, the diffs of what changed
- ``POST /api/v1/toolkits/<slug>/approve``: body ``{"tools": [names]}`` or ``{"all": true}``
  (``"flagged": true`` with ``all`` approves the tools the screening flagged too)
- ``POST /api/v1/tools/<name>/kind``: body ``{"kind": "read"|"write"|"destructive"|"auto"}``

The ``ResyncScheduler`` starts and stops in the serving order (``gateway/lifecycle.py``).
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, Request

from appliance.errors import InvalidParams
from appliance.gateway import sync
from appliance.gateway.admin import people
from appliance.web.admin_routes import answers, body, managed, person_only, upstream_bad_gateway

bp = Blueprint("admin_sync", url_prefix="/api/v1")


# A toolkit's owner may re-sync it and approve its pending tools; reclassifying stays with
# admins (a kind decides which runner, and so which approval prompt, a tool gets).
bp.on_request(person_only)


def _body(request: Request, *, optional: bool = False) -> dict[str, Any]:
    return body(request, optional=optional, check_text=False)


def _project(request: Request, doc: dict[str, Any], default: str | None = "default") -> str | None:
    value = doc.get("project")
    if value is None:  # absent or null: the query string's, else the default
        value = request.args.get("project", default)
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidParams("'project' must be a non-empty string", field="project")
    return value


async def _managed_project(request: Request, slug: str, doc: dict[str, Any]) -> str:
    project = _project(request, doc)
    assert project is not None
    await managed(request, slug, project)
    return project


@bp.post("/toolkits/<slug>/sync")
@answers(refuse=upstream_bad_gateway)
async def sync_toolkit(request: Request, slug: str) -> Any:
    project = await _managed_project(request, slug, _body(request, optional=True))
    report = await sync.resync_toolkit(request.app.ctx.rt, slug, project=project)
    return report.as_dict()


@bp.get("/toolkits/<slug>/pending")
@answers()
async def pending(request: Request, slug: str) -> Any:
    project = await _managed_project(request, slug, {})
    tools = await sync.list_pending(request.app.ctx.rt, slug, project)
    return {"toolkit": slug, "project": project, "pending": tools}


@bp.post("/toolkits/<slug>/approve")
@answers()
async def approve(request: Request, slug: str) -> Any:
    doc = _body(request)
    project = await _managed_project(request, slug, doc)
    every, names, flagged = doc.get("all"), doc.get("tools"), doc.get("flagged", False)
    if every is not None and not isinstance(every, bool):
        raise InvalidParams("'all' must be true or false", field="all")
    if not isinstance(flagged, bool):
        raise InvalidParams("'flagged' must be true or false", field="flagged")
    if flagged and not every:
        raise InvalidParams(
            "'flagged' goes with 'all'; name flagged tools in 'tools' instead", field="flagged"
        )
    if every and names is not None:
        raise InvalidParams("give either 'tools' or 'all', not both", field="tools")
    tools: list[str] | None = None
    if not every:
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise InvalidParams(
                "'tools' must be a non-empty list of tool names (or send {\"all\": true})", field="tools"
            )
        tools = [str(n) for n in names]
    done = await sync.approve(request.app.ctx.rt, slug, project=project, tools=tools, flagged=flagged)
    return {"toolkit": slug, "project": project, **done}


@bp.post("/tools/<name>/kind")
@answers()
async def reclassify(request: Request, name: str) -> Any:
    people.require_admin(request.ctx.principal)
    doc = _body(request)
    if "kind" not in doc:
        raise InvalidParams("'kind' is required: read, write, destructive or auto", field="kind")
    return await sync.reclassify(
        request.app.ctx.rt, name, doc["kind"], project=_project(request, doc, default=None)
    )
