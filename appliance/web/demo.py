"""The built-in demo API over HTTP, at ``/demo/api`` on ``serve``'s own port.

The service itself is ``gateway/demo_api.py``; its toolkit's calls are answered in process
at a reserved origin, in every process. This blueprint only offers the same handler, on the
same notes (the runtime's), to people and tools that want to look over HTTP.
"""

from __future__ import annotations

from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance.gateway import demo_api

bp = Blueprint("demo", url_prefix="/demo")


@bp.get("/openapi.json")
async def spec(request: Request) -> HTTPResponse:
    return response.json(demo_api.openapi_spec(demo_api.ORIGIN))


@bp.route("/api/<rest:path>", methods=["GET", "POST", "DELETE"])
async def api(request: Request, rest: str) -> HTTPResponse:
    target = request.path + (f"?{request.query_string}" if request.query_string else "")
    status, headers, body = demo_api.handle(
        request.app.ctx.rt.demo_notes, request.method, target, request.body
    )
    return response.raw(body, status=status, headers=headers or None)
