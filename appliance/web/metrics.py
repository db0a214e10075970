"""Operations endpoints: ``/metrics`` (Prometheus text), ``/healthz`` (alive), ``/readyz`` (ready).

``/metrics`` and the probes carry no key: they are for a scraper and an orchestrator on the
host, hold no secret and no argument value, and the server binds to loopback by default.
``/readyz`` answers 503 until the database takes a write and every migration is applied.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST
from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance.gateway import readiness, telemetry

bp = Blueprint("metrics")


@bp.get("/metrics")
async def metrics(request: Request) -> HTTPResponse:
    body = await telemetry.scrape(request.app.ctx.rt)
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
