"""The appliance's OAuth client face: its Client ID Metadata Document (issue 19).

Public and unauthenticated, as the draft requires: authorization servers fetch it by URL.
It names no secret: the ``client_id`` (its own URL), the name, and the one redirect URI.

``/oauth/callback`` is where an authorization server sends the browser back with a code
(``gateway/connections.finish`` checks it): one started in the console is handed on to
``/console/connections/finish`` (a fixed path: nothing in the request chooses where), where
the console's own cookie comes along and is checked; a headless one (started through the
API or the CLI) is finished here and gets a short page saying it is done. Failures are shown, never
redirected. Nothing on either page quotes the code, a token or the server's answer.
"""

from __future__ import annotations

import html
import logging
from urllib.parse import urlencode

from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError, NotFound
from appliance.gateway import oauth_client
from appliance.gateway.connections import CONSOLE_PATH, finish, in_session
from appliance.web.admin_routes import error_response

log = logging.getLogger(__name__)
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
}

bp = Blueprint("oauth", url_prefix="/oauth")


@bp.get("/client-metadata.json")
async def client_metadata(request: Request) -> HTTPResponse:
    document = oauth_client.client_metadata(request.app.ctx.rt.settings)
    if document is None:
        return error_response(NotFound("no public URL is set (TOOLSPOKE_PUBLIC_URL): no client metadata"))
    return response.json(document, headers={"Cache-Control": "public, max-age=3600"})


def _page(title: str, text: str, status: int) -> HTTPResponse:
    body = (
        f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title></head>"
        f"<body><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p></body></html>"
    )
    return response.html(body, status=status, headers=_PAGE_HEADERS)


@bp.get("/callback")
async def callback(request: Request) -> HTTPResponse:
    params = {k: v[0] for k, v in request.args.items() if v}
    rt = request.app.ctx.rt
    if await in_session(rt, params.get("state")):
        # Started in the console: finished there, where the session cookie is sent (a fixed
        # path; the query is the authorization server's answer, passed on as it came).
        target = f"{CONSOLE_PATH}/finish?{urlencode(params)}"
        shown = html.escape(target)
        body = (
            "<!doctype html><html><head><meta charset=utf-8>"
            f'<meta http-equiv="refresh" content="0;url={shown}">'
            f'<title>Connecting</title></head><body><p><a href="{shown}">Continue to the console</a></p>'
            "</body></html>"
        )
        return response.html(body, headers=_PAGE_HEADERS)
    try:
        done = await finish(rt, params, session_hash=None)
    except ApplianceError as exc:
        log.info("an OAuth callback was refused: %s", exc.reason)
        return _page("Not connected", exc.public_message, 400 if exc.http_status < 500 else 502)
    return _page(
        "Connected",
        f"Your connection to {done['toolkit']} (project {done['project']}) is ready; "
        "you may close this window.",
        200,
    )
