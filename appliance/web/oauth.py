"""The appliance's OAuth client face: its Client ID Metadata Document (issue 19).

Public and unauthenticated, as the draft requires: authorization servers fetch it by URL.
It names no secret: the ``client_id`` (its own URL), the name, and the one redirect URI.
The ``/oauth/callback`` that redirect URI names comes with the console's connect pages.
"""

from __future__ import annotations

from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance.errors import NotFound
from appliance.gateway import oauth_client
from appliance.web.admin_routes import error_response

bp = Blueprint("oauth", url_prefix="/oauth")


@bp.get("/client-metadata.json")
async def client_metadata(request: Request) -> HTTPResponse:
    document = oauth_client.client_metadata(request.app.ctx.rt.settings)
    if document is None:
        return error_response(NotFound("no public URL is set (TOOLSPOKE_PUBLIC_URL): no client metadata"))
    return response.json(document, headers={"Cache-Control": "public, max-age=3600"})
