"""Who is at the console and whether their request may change anything.

Every console request passes the Host check of the rest of ``web/`` (DNS rebinding); every
POST also the Origin check and a CSRF token: the session's (``gateway/admin/sessions``) once
signed in, and before that a sign-in token held in a cookie of its own (double submit), so
that no other site can sign a browser in under the other site's key either. The session's
cookie is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page sends
it), ``Path=/console`` and ``Secure`` when the request came over TLS.
"""

from __future__ import annotations

import hmac
import secrets

from sanic import Request
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError, Forbidden, Unauthorized, UpstreamError
from appliance.gateway.admin import sessions
from appliance.models import Principal
from appliance.web.guards import check_host, check_origin

SESSION_COOKIE = "toolspoke_console"
SIGNIN_COOKIE = "toolspoke_signin"
PATH = "/console"


def check_request(request: Request) -> None:
    """Host always; for a POST also Origin and the browser's own word on where it came from."""
    settings = request.app.ctx.rt.settings
    check_host(request, settings)
    if request.method == "POST":
        check_origin(request, settings)
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            raise Forbidden("the console takes forms from its own pages only", field="origin")


def session_token(request: Request) -> str:
    return request.cookies.get(SESSION_COOKIE, "") or ""


async def viewer(request: Request) -> Principal | None:
    """The signed-in principal, or None (no cookie, or a session that has ended)."""
    token = session_token(request)
    if not token:
        return None
    try:
        return await sessions.resume(request.app.ctx.rt, token)
    except Unauthorized:
        return None


def csrf(request: Request) -> str:
    """The CSRF token the pages of this request's session carry."""
    return sessions.csrf_token(session_token(request))


def check_csrf(request: Request) -> None:
    """A POST of a signed-in session carries its CSRF token; anything else changes nothing."""
    given = request.form.get("csrf", "") if request.form else ""
    if not sessions.csrf_matches(session_token(request), str(given)):
        raise Forbidden(
            "the form's CSRF token is missing or wrong; reload the page and try again", field="csrf"
        )


def new_signin_token() -> str:
    return secrets.token_urlsafe(24)


def check_signin_token(request: Request) -> None:
    held = request.cookies.get(SIGNIN_COOKIE, "") or ""
    given = str(request.form.get("csrf", "") if request.form else "")
    if not held or not given or not hmac.compare_digest(held.encode(), given.encode("utf-8", "replace")):
        raise Forbidden("the sign-in form has expired; reload the page and sign in again", field="csrf")


def set_cookie(
    request: Request, resp: HTTPResponse, name: str, value: str, *, max_age: int | None = None
) -> None:
    """A console cookie; without ``max_age`` it lasts until the browser closes (the server ends
    the session sooner, whatever the browser keeps)."""
    resp.add_cookie(
        name,
        value,
        path=PATH,
        httponly=True,
        samesite="Strict",
        secure=over_tls(request),
        max_age=max_age,
    )


def over_tls(request: Request) -> bool:
    """Whether the request came over TLS: Sanic's own listener (or a proxy it trusts by its
    forwarding settings) says https, or the transport carries an SSL context (ASGI too)."""
    return request.scheme == "https" or bool(request.transport.get_extra_info("sslcontext"))


def clear_cookie(request: Request, resp: HTTPResponse, name: str) -> None:
    set_cookie(request, resp, name, "", max_age=0)


def status_of(exc: ApplianceError) -> int:
    # A URL the egress guard refuses is a bad form field (as in the admin API), not a 502.
    if isinstance(exc, UpstreamError) and exc.reason == "ssrf_blocked":
        return 422
    return exc.http_status if 400 <= exc.http_status < 600 else 400
