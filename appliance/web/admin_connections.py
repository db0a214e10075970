"""Admin API for connections (issue 19): each person's own credential behind a toolkit.

A user's key (never an agent's); each person acts on their own connections, an admin may
name another user with ``user``. Tokens are write-only: no answer carries one.

- ``GET    /api/v1/connections``: the ``per_user`` toolkits the caller sees, with status,
  scheme, scopes and expiry
- ``POST   /api/v1/connections/<slug>``: start an OAuth connection; answers the
  ``authorization_url`` to open in any browser (the headless path): the authorization server
  sends it back to the appliance's own ``/oauth/callback``, which finishes the connection
- ``PUT    /api/v1/connections/<slug>``: the caller's own token, key or Basic pair
  (``{"scheme": "bearer", "token": ...}``, as for a toolkit's credential)
- ``DELETE /api/v1/connections/<slug>``: revoke at the authorization server where it offers
  revocation (RFC 7009) and delete the sealed tokens
- ``GET    /api/v1/toolkits/<slug>/connections``: the mode and who is connected (the
  toolkit's owner or an admin; names, never tokens)
- ``PUT    /api/v1/toolkits/<slug>/connection-mode``: ``{"mode": "shared"|"per_user"}``
- ``GET|PUT|DELETE /api/v1/toolkits/<slug>/oauth-client``: the OAuth client registered for
  an OpenAPI toolkit's spec-declared authorization-code flow (``{"client_id": ...,
  "client_secret": ..., "auth_method": ...}``; the secret is sealed and never answered)

``project`` comes from the query string or the body (default ``default``).
"""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, Request

from appliance.gateway.admin import connections
from appliance.web.admin_routes import answers, body, person_only, project, ssrf_unprocessable

bp = Blueprint("admin_connections", url_prefix="/api/v1")
bp.on_request(person_only)


def _user(request: Request, doc: dict[str, Any] | None = None) -> Any:
    return (doc or {}).get("user", request.args.get("user"))


@bp.get("/connections")
@answers()
async def list_connections(request: Request) -> Any:
    return await connections.mine(request.app.ctx.rt, request.ctx.principal, user=_user(request))


@bp.post("/connections/<slug>")
@answers(refuse=ssrf_unprocessable)
async def start_connection(request: Request, slug: str) -> Any:
    doc = body(request, optional=True)
    return await connections.start(
        request.app.ctx.rt, request.ctx.principal, slug, project(request, doc), user=_user(request, doc)
    )


@bp.put("/connections/<slug>")
@answers()
async def put_connection(request: Request, slug: str) -> Any:
    doc = body(request)
    return await connections.set_own(
        request.app.ctx.rt, request.ctx.principal, slug, project(request, doc), doc, user=_user(request, doc)
    )


@bp.delete("/connections/<slug>")
@answers()
async def delete_connection(request: Request, slug: str) -> Any:
    return await connections.disconnect(
        request.app.ctx.rt, request.ctx.principal, slug, project(request), user=_user(request)
    )


@bp.get("/toolkits/<slug>/connections")
@answers()
async def toolkit_connections(request: Request, slug: str) -> Any:
    return await connections.toolkit_connections(
        request.app.ctx.rt, request.ctx.principal, slug, project(request)
    )


@bp.put("/toolkits/<slug>/connection-mode")
@answers()
async def put_mode(request: Request, slug: str) -> Any:
    doc = body(request)
    return await connections.set_mode(
        request.app.ctx.rt, request.ctx.principal, slug, project(request, doc), doc.get("mode")
    )


@bp.get("/toolkits/<slug>/oauth-client")
@answers()
async def get_client(request: Request, slug: str) -> Any:
    return await connections.oauth_client(request.app.ctx.rt, request.ctx.principal, slug, project(request))


@bp.put("/toolkits/<slug>/oauth-client")
@answers()
async def put_client(request: Request, slug: str) -> Any:
    doc = body(request)
    return await connections.set_client(
        request.app.ctx.rt, request.ctx.principal, slug, project(request, doc), doc
    )


@bp.delete("/toolkits/<slug>/oauth-client")
@answers()
async def delete_client(request: Request, slug: str) -> Any:
    return await connections.clear_client(request.app.ctx.rt, request.ctx.principal, slug, project(request))
