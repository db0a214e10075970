"""Refusals made before any route runs: a doubled Host or Origin header, a body over the limit.

Each is answered in the language of the route it was meant for: a JSON-RPC error on the MCP
routes (``/mcp``, ``/mcp/<slug>``, legacy ``/sse`` and ``/messages``), the admin API's error
document everywhere else (``/api/v1``, the health routes).

Two Host or Origin headers are refused outright: the checks in ``guards.py`` read one value,
and which one a proxy, Sanic and a browser each take differs, so ``Origin: http://127.0.0.1``
followed by ``Origin: https://evil.example`` passed a check that another component would
have answered for the second.
"""

from __future__ import annotations

from sanic import Request, Sanic
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError, InvalidRequest
from appliance.web.admin_routes import error_response
from appliance.web.mcp import rpc_error

_RPC_PREFIXES = ("/mcp/", "/sse/")
_RPC_PATHS = {"/mcp", "/sse", "/messages"}
SINGLE_HEADERS = ("host", "origin")


class BodyTooLarge(InvalidRequest):
    http_status = 413
    reason = "body_too_large"


def is_rpc_route(path: str) -> bool:
    return path in _RPC_PATHS or path.startswith(_RPC_PREFIXES)


def refusal(request: Request, exc: ApplianceError) -> HTTPResponse:
    if is_rpc_route(request.path):
        return rpc_error(exc, status=exc.http_status)
    return error_response(exc)


def duplicated(request: Request) -> str | None:
    """The first header of ``SINGLE_HEADERS`` the request carries more than once."""
    for name in SINGLE_HEADERS:
        if len(request.headers.getall(name, [])) > 1:
            return name
    return None


def too_large(request: Request, limit: int) -> HTTPResponse:
    exc = BodyTooLarge(
        f"request body is larger than the limit of {limit} bytes (TOOLSPOKE_MAX_REQUEST_BYTES)",
        field="body",
        data={"limit_bytes": limit},
    )
    return refusal(request, exc)


async def single_host_and_origin(request: Request) -> HTTPResponse | None:
    name = duplicated(request)
    if name is None:
        return None
    exc = InvalidRequest(f"more than one {name.capitalize()} header; send exactly one", field=name)
    return refusal(request, exc)


def install(app: Sanic) -> None:
    # Before any other middleware and every route, health routes included.
    app.register_middleware(single_host_and_origin, "request", priority=100)
