"""What every ``/api/v1`` route shares: the caller checks, the JSON body, refusals, the answer.

A route is written as ``@answers()`` (or ``@answers(201)``) over a handler that returns a JSON
value: the decorator turns the value into the response and any ApplianceError into the
error document ``{"error": {reason, message, field, ...}}`` with the status it carries. A
handler that must choose its own status returns an ``HTTPResponse``, which passes through.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from sanic import Request, response
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError, InvalidParams, InvalidRequest, UpstreamError
from appliance.gateway.admin import grants, people
from appliance.models import Principal
from appliance.rpc import jsonrpc
from appliance.web.guards import authenticate, check_host, check_origin, require_admin

Handler = Callable[..., Awaitable[HTTPResponse]]
JsonHandler = Callable[..., Awaitable[Any]]
Refusal = Callable[[ApplianceError], HTTPResponse]


# The members of an error's data an API client reads beside the message: the wait of a
# throttled call, an import refusal's skipped-operations report, every argument error.
PUBLIC_EXTRAS = (
    "retry_after_s",
    "skipped",
    "skipped_count",
    "errors",
    "error_count",
    "conflicts",
    "conflict_count",
)


def error_response(exc: ApplianceError, status: int | None = None) -> HTTPResponse:
    doc: dict[str, Any] = {"reason": exc.reason, "message": exc.public_message}
    if exc.field is not None:
        doc["field"] = exc.field
    for extra in PUBLIC_EXTRAS:
        if extra in exc.data:
            doc[extra] = exc.data[extra]
    headers = {"WWW-Authenticate": 'Bearer realm="toolspoke"'} if exc.http_status == 401 else {}
    if "retry_after_s" in exc.data:
        headers["Retry-After"] = str(exc.data["retry_after_s"])
    return response.json({"error": doc}, status=status or exc.http_status, headers=headers or None)


def ssrf_unprocessable(exc: ApplianceError) -> HTTPResponse:
    """A URL the egress guard refuses is a bad request naming the field (SSRF-01: 422), not a 502;
    fetching an allowed URL that then fails stays the upstream's 502."""
    if isinstance(exc, UpstreamError) and exc.reason == "ssrf_blocked":
        return error_response(exc, 422)
    return error_response(exc)


def upstream_bad_gateway(exc: ApplianceError) -> HTTPResponse:
    """An upstream that cannot be listed is the upstream's failure: 502 with its reason."""
    return error_response(exc, 502 if isinstance(exc, UpstreamError) else None)


def answers(status: int = 200, refuse: Refusal = error_response) -> Callable[[JsonHandler], Handler]:
    """The handler's JSON value becomes the response (``status``); a refusal its error document."""

    def decorate(handler: JsonHandler) -> Handler:
        @functools.wraps(handler)
        async def wrapper(request: Request, *args: Any, **kwargs: Any) -> HTTPResponse:
            try:
                value = await handler(request, *args, **kwargs)
            except ApplianceError as exc:
                return refuse(exc)
            return value if isinstance(value, HTTPResponse) else response.json(value, status=status)

        return wrapper

    return decorate


async def admin_only(request: Request) -> HTTPResponse | None:
    """Every admin route: Host and Origin checks, then an admin key (a response refuses)."""
    try:
        check_host(request, request.app.ctx.rt.settings)
        check_origin(request, request.app.ctx.rt.settings)
        request.ctx.principal = await require_admin(request, request.app.ctx.rt)
    except ApplianceError as exc:
        return error_response(exc)
    return None


async def person_only(request: Request) -> HTTPResponse | None:
    """Host and Origin checks, then a user's key (admin or not; an agent's key is refused)."""
    try:
        check_host(request, request.app.ctx.rt.settings)
        check_origin(request, request.app.ctx.rt.settings)
        principal = await authenticate(request, request.app.ctx.rt)
        people.require_person(principal)
        request.ctx.principal = principal
    except ApplianceError as exc:
        return error_response(exc)
    return None


def actor(request: Request) -> Principal:
    """The caller, as ``person_only`` or ``admin_only`` found them."""
    found: Principal = request.ctx.principal
    return found


def body(request: Request, *, optional: bool = False, check_text: bool = True) -> dict[str, Any]:
    """The request's JSON object (``optional``: an empty body is ``{}``)."""
    if optional and not request.body:
        return {}
    try:
        doc = request.json
    except Exception:  # noqa: BLE001 - Sanic raises its own type for bad JSON
        if jsonrpc.could_be_too_deep(request.body) and jsonrpc.text_too_deep(request.body):
            raise _too_deep() from None  # the parser's own stack gave out
        raise InvalidParams("request body is not valid JSON", field="body") from None
    if jsonrpc.could_be_too_deep(request.body) and jsonrpc.too_deep(doc):
        raise _too_deep()  # before any recursive step below meets it
    if not isinstance(doc, dict):
        raise InvalidParams("request body must be a JSON object", field="body")
    if check_text:
        _check_text(doc, "body")
    return doc


def _too_deep() -> InvalidRequest:
    return InvalidRequest(
        jsonrpc.nesting_refusal("request body"), field="body", data={"limit": jsonrpc.MAX_DEPTH}
    )


def _check_text(value: Any, where: str) -> None:
    """JSON may escape lone surrogates (\\ud800), which no UTF-8 store can hold: refuse them."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidParams(f"'{where}' holds text that is not valid Unicode", field=where) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, where)
            _check_text(item, key if where == "body" else where)
    elif isinstance(value, list):
        for item in value:
            _check_text(item, where)


def project(request: Request, doc: dict[str, Any] | None = None) -> Any:
    """The body's ``project``, else the query string's, else ``default`` (the operation checks it)."""
    return (doc or {}).get("project", request.args.get("project", "default"))


async def managed(request: Request, slug: str, project: str) -> None:
    """The caller owns the toolkit or is an admin; anything else is a toolkit that does not exist."""
    await grants.managed_toolkit(request.app.ctx.rt, request.ctx.principal, slug, project)
