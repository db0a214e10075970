"""Admin API for re-sync, approval and reclassification, and the re-sync scheduler's lifecycle.

Routes (a user's key: the toolkit's owner or an admin; reclassifying: an admin;
``project`` from the query string or the body, default ``default``):

- ``POST /api/v1/toolkits/<slug>/sync``: list the upstream's tools now and apply the plan
- ``GET  /api/v1/toolkits/<slug>/pending``: tools awaiting approval, full definitions
- ``POST /api/v1/toolkits/<slug>/approve``: body ``{"tools": [names]}`` or ``{"all": true}``
- ``POST /api/v1/tools/<name>/kind``: body ``{"kind": "read"|"write"|"destructive"|"auto"}``

``install(app)`` mounts the blueprint and starts/stops the ``ResyncScheduler`` with the
server; call it after the listener that opens the runtime is registered (shutdown
listeners run in reverse order, so the scheduler then stops before the runtime closes).
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, Request, Sanic, response
from sanic.response import HTTPResponse

from appliance.access import grants, principals
from appliance.errors import ApplianceError, InvalidParams, UpstreamError
from appliance.gateway import sync
from appliance.gateway.sync_schedule import ResyncScheduler
from appliance.web.admin import error_response, person_only

bp = Blueprint("admin_sync", url_prefix="/api/v1")


# A toolkit's owner may re-sync it and approve its pending tools; reclassifying stays with
# admins (a kind decides which runner, and so which approval prompt, a tool gets).
bp.on_request(person_only)


async def _managed(request: Request, slug: str, project: str) -> None:
    """The caller owns the toolkit or is an admin; anything else is a toolkit that does not exist."""
    async with request.app.ctx.rt.db.read() as conn:
        await grants.find_toolkit(conn, request.ctx.principal, slug, project)


def _body(request: Request, *, optional: bool = False) -> dict[str, Any]:
    if optional and not request.body:
        return {}
    try:
        doc = request.json
    except Exception:  # noqa: BLE001 - Sanic raises its own type for bad JSON
        raise InvalidParams("request body is not valid JSON", field="body") from None
    if not isinstance(doc, dict):
        raise InvalidParams("request body must be a JSON object", field="body")
    return doc


def _project(request: Request, doc: dict[str, Any], default: str | None = "default") -> str | None:
    value = doc.get("project")
    if value is None:  # absent or null: the query string's, else the default
        value = request.args.get("project", default)
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidParams("'project' must be a non-empty string", field="project")
    return value


@bp.post("/toolkits/<slug>/sync")
async def sync_toolkit(request: Request, slug: str) -> HTTPResponse:
    try:
        doc = _body(request, optional=True)
        project = _project(request, doc)
        assert project is not None
        await _managed(request, slug, project)
        report = await sync.resync_toolkit(request.app.ctx.rt, slug, project=project)
    except ApplianceError as exc:
        # An upstream that cannot be listed is the upstream's failure: 502 with its reason.
        return error_response(exc, 502 if isinstance(exc, UpstreamError) else None)
    return response.json(report.as_dict())


@bp.get("/toolkits/<slug>/pending")
async def pending(request: Request, slug: str) -> HTTPResponse:
    try:
        project = _project(request, {})
        assert project is not None
        await _managed(request, slug, project)
        tools = await sync.list_pending(request.app.ctx.rt, slug, project)
    except ApplianceError as exc:
        return error_response(exc)
    return response.json({"toolkit": slug, "project": project, "pending": tools})


@bp.post("/toolkits/<slug>/approve")
async def approve(request: Request, slug: str) -> HTTPResponse:
    try:
        doc = _body(request)
        project = _project(request, doc)
        assert project is not None
        await _managed(request, slug, project)
        every, names = doc.get("all"), doc.get("tools")
        if every is not None and not isinstance(every, bool):
            raise InvalidParams("'all' must be true or false", field="all")
        if every and names is not None:
            raise InvalidParams("give either 'tools' or 'all', not both", field="tools")
        tools: list[str] | None = None
        if not every:
            if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
                raise InvalidParams(
                    "'tools' must be a non-empty list of tool names (or send {\"all\": true})", field="tools"
                )
            tools = [str(n) for n in names]
        approved = await sync.approve(request.app.ctx.rt, slug, project=project, tools=tools)
    except ApplianceError as exc:
        return error_response(exc)
    return response.json({"toolkit": slug, "project": project, "approved": approved})


@bp.post("/tools/<name>/kind")
async def reclassify(request: Request, name: str) -> HTTPResponse:
    try:
        principals.require_admin(request.ctx.principal)
        doc = _body(request)
        if "kind" not in doc:
            raise InvalidParams("'kind' is required: read, write, destructive or auto", field="kind")
        result = await sync.reclassify(
            request.app.ctx.rt, name, doc["kind"], project=_project(request, doc, default=None)
        )
    except ApplianceError as exc:
        return error_response(exc)
    return response.json(result)


def install(app: Sanic) -> None:
    """Mount the routes and run a ``ResyncScheduler`` while the server serves."""
    app.blueprint(bp)

    @app.after_server_start
    async def start_resync(app: Sanic) -> None:
        scheduler = ResyncScheduler(app.ctx.rt)
        scheduler.start()
        app.ctx.resync = scheduler

    @app.before_server_stop
    async def stop_resync(app: Sanic) -> None:
        scheduler = getattr(app.ctx, "resync", None)
        if scheduler is not None:
            await scheduler.aclose()
