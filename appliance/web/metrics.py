"""Operations endpoints: ``/metrics`` (Prometheus text), ``/healthz`` (alive), ``/readyz`` (ready).

``/metrics`` is operational data (toolkit names, call volumes, quota use): with
``TOOLSPOKE_METRICS_KEY`` set it needs that key (or an admin key) as a bearer token; unset,
it is open only while the server binds to loopback, and needs an admin key on any other
bind. The probes carry no key: an orchestrator must reach them, and they say only
alive/ready. ``/readyz`` answers 503 until the database takes a write and every migration
is applied.
"""

from __future__ import annotations

import hmac

from prometheus_client import CONTENT_TYPE_LATEST
from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance.errors import Forbidden, Unauthorized
from appliance.gateway import readiness, telemetry
from appliance.gateway.runtime import Runtime
from appliance.web.admin import error_response
from appliance.web.guards import bearer_token, require_admin

bp = Blueprint("metrics")
LOOPBACK_BINDS = ("127.0.0.1", "::1", "localhost")


async def _may_scrape(request: Request, rt: Runtime) -> None:
    wanted = rt.settings.metrics_key
    if wanted is None and rt.settings.host in LOOPBACK_BINDS:
        return
    token = (bearer_token(request) or "").encode()
    if wanted is not None and hmac.compare_digest(token, wanted.reveal().encode()):
        return
    try:
        await require_admin(request, rt)
    except Unauthorized:
        needed = "TOOLSPOKE_METRICS_KEY or an admin key" if wanted else "an admin key"
        raise Unauthorized(f"/metrics needs {needed}: send 'Authorization: Bearer <key>'") from None


@bp.get("/metrics")
async def metrics(request: Request) -> HTTPResponse:
    rt: Runtime = request.app.ctx.rt
    try:
        await _may_scrape(request, rt)
    except (Unauthorized, Forbidden) as exc:
        return error_response(exc)
    body = await telemetry.scrape(rt)
    return response.raw(body, content_type=CONTENT_TYPE_LATEST)


@bp.get("/healthz")
async def healthz(request: Request) -> HTTPResponse:
    return response.json({"status": "alive"})


@bp.get("/readyz")
async def readyz(request: Request) -> HTTPResponse:
    problems = await readiness.problems(request.app.ctx.rt)
    if problems:
        return response.json({"status": "not ready", "problems": problems}, status=503)
    return response.json({"status": "ready"})
