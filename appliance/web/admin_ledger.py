"""Admin API for spend and accounting: prices and ceilings, credit, call history.

- ``GET  /api/v1/toolkits/<slug>/quota[?project=P]``: fee, ceilings, unit and the current
  UTC day's and month's use (owners of the toolkit and admins)
- ``PUT  /api/v1/toolkits/<slug>/quota[?project=P]``: body with any of ``fee`` (credits),
  ``daily_limit``, ``monthly_limit`` (calls or credits, 0: none), ``unit`` (admin)
- ``GET  /api/v1/users/<user_id>/credits``: balance and recent entries (admin, or that user)
- ``POST /api/v1/users/<user_id>/credits``: body ``{"amount", "note"?}`` (admin)
- ``POST /api/v1/ledger/<entry_id>/void``: reverse one charge, body ``{"note"?}`` (admin)
- ``GET  /api/v1/toolsets/<slug>/calls`` (also ``/toolkits/<slug>/calls``), ``/users/<user_id>/calls``,
  ``/agents/<agent_id>/calls``: call history, newest first; query ``since``, ``until`` (RFC 3339 or
  unix seconds), ``outcome``, ``tool``, ``limit`` (≤ 500), ``cursor`` (from ``next_cursor``)

Errors are JSON ``{"error": {reason, message, field}}`` like the rest of ``/api/v1``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError, InvalidParams
from appliance.gateway import ledgering
from appliance.gateway.admin import ledger
from appliance.models import Principal
from appliance.web.admin import body as json_object
from appliance.web.admin import error_response
from appliance.web.guards import authenticate, check_host, check_origin

bp = Blueprint("admin_ledger", url_prefix="/api/v1")


async def _caller(request: Request) -> Principal:
    """Any valid key; who may do what is the operation's to say (``gateway/admin/ledger.py``)."""
    rt = request.app.ctx.rt
    check_host(request, rt.settings)
    check_origin(request, rt.settings)
    return await authenticate(request, rt)


def _body(request: Request) -> dict[str, Any]:
    return json_object(request) if request.body else {}


async def _answer(work: Callable[[], Awaitable[dict[str, Any]]], status: int = 200) -> HTTPResponse:
    try:
        return response.json(await work(), status=status)
    except ApplianceError as exc:
        return error_response(exc)


@bp.get("/toolkits/<slug>/quota")
async def get_quota(request: Request, slug: str) -> HTTPResponse:
    async def work() -> dict[str, Any]:
        viewer = await _caller(request)
        return await ledger.quota(request.app.ctx.rt, viewer, slug, request.args.get("project"))

    return await _answer(work)


@bp.put("/toolkits/<slug>/quota")
async def put_quota(request: Request, slug: str) -> HTTPResponse:
    async def work() -> dict[str, Any]:
        admin = await _caller(request)
        rt = request.app.ctx.rt
        return await ledger.set_quota(rt, admin, slug, _body(request), request.args.get("project"))

    return await _answer(work)


@bp.get("/users/<user_id:int>/credits")
async def get_credits(request: Request, user_id: int) -> HTTPResponse:
    async def work() -> dict[str, Any]:
        viewer = await _caller(request)
        return await ledger.account(request.app.ctx.rt, viewer, user_id)

    return await _answer(work)


@bp.post("/users/<user_id:int>/credits")
async def post_credits(request: Request, user_id: int) -> HTTPResponse:
    async def work() -> dict[str, Any]:
        admin = await _caller(request)
        doc = _body(request)
        if "amount" not in doc:
            raise InvalidParams("'amount' (credits) is required", field="amount")
        return await ledger.grant_credit(
            request.app.ctx.rt, admin, user_id, doc["amount"], note=doc.get("note", "")
        )

    return await _answer(work, 201)


@bp.post("/ledger/<entry_id:int>/void")
async def post_void(request: Request, entry_id: int) -> HTTPResponse:
    async def work() -> dict[str, Any]:
        admin = await _caller(request)
        note = _body(request).get("note", "")
        return await ledger.void(request.app.ctx.rt, admin, entry_id, note=note)

    return await _answer(work, 201)


def _limit(request: Request) -> int:
    raw = request.args.get("limit")
    if raw is None:
        return 100
    if not raw.isdigit():
        raise InvalidParams("'limit' must be a whole number from 1 to 500", field="limit")
    return int(raw)


async def _history(request: Request, **scope: Any) -> HTTPResponse:
    async def work() -> dict[str, Any]:
        viewer = await _caller(request)
        a = request.args
        return await ledgering.calls(
            request.app.ctx.rt,
            viewer,
            project=a.get("project"),
            since=a.get("since"),
            until=a.get("until"),
            outcome=a.get("outcome"),
            tool=a.get("tool"),
            limit=_limit(request),
            cursor=a.get("cursor"),
            **scope,
        )

    return await _answer(work)


async def toolkit_calls(request: Request, slug: str) -> HTTPResponse:
    return await _history(request, toolkit_slug=slug)


# The name (toolsets) and the house's (toolkits) for the same history.
bp.add_route(toolkit_calls, "/toolsets/<slug>/calls", methods=["GET"], name="toolset_calls")
bp.add_route(toolkit_calls, "/toolkits/<slug>/calls", methods=["GET"], name="toolkit_calls")


@bp.get("/users/<user_id:int>/calls")
async def user_calls(request: Request, user_id: int) -> HTTPResponse:
    return await _history(request, user=user_id)


@bp.get("/agents/<agent_id:int>/calls")
async def agent_calls(request: Request, agent_id: int) -> HTTPResponse:
    return await _history(request, agent=agent_id)
