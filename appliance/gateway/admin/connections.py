"""Connections as people and managers handle them (issue 19), one home for every face.

- A person (their own key or console session, never an agent's key) lists the ``per_user``
  toolkits they can see with their status, connects (OAuth: the authorization URL; other
  schemes: their own token, key or Basic pair, write-only) and disconnects. Only for
  themselves: an admin or the operator may name another user (``user``), so the CLI can act
  for a person; nobody ever reads a token back.
- A toolkit's owner or an admin sets its mode (``shared``/``per_user``) and sees who is
  connected (names, status, scopes, expiry), never a value.

A toolkit the actor cannot see is the toolkit that does not exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from appliance.access import visibility
from appliance.catalogue import store
from appliance.errors import Forbidden, InvalidParams, NotFound
from appliance.gateway import connections
from appliance.gateway.admin.grants import managed_toolkit
from appliance.gateway.admin.people import require_person, user_id
from appliance.gateway.admin.projects import check_project
from appliance.models import Principal
from appliance.vault import connections as vault_conns

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime


async def _target(rt: Runtime, actor: Principal, user: int | str | None) -> int:
    """Whose connection: the actor's own, or (admins and the operator) the named user's."""
    require_person(actor)
    if user is not None and (isinstance(user, bool) or not isinstance(user, (int, str)) or user == ""):
        raise InvalidParams("'user' must be a user's name or id", field="user")
    if user is None or user == actor.name or user == actor.user_id:
        if actor.operator:
            raise InvalidParams(
                "the operator has no connections of its own: name a user (--user)", field="user"
            )
        return actor.user_id
    if not actor.is_admin:
        raise Forbidden("only admins may act on another user's connections", field="user")
    async with rt.db.read() as conn:
        return await user_id(conn, user)


async def _kit(rt: Runtime, actor: Principal, slug: str, project: str, *, who: int) -> connections.Kit:
    """A toolkit the target user can see (admins act within that user's sight too)."""
    check_project(project)
    async with rt.db.read() as conn:

        def find(r: Any) -> Any:
            subject = actor if who == actor.user_id else None
            scope = visibility.scope_in(r, subject) if subject is not None else None
            return store.find_toolkits_in(r, slug, project=project, scope=scope)

        kits = await conn.batch(find)
        if not kits:
            raise NotFound(f"unknown toolkit {slug!r} in project {project!r}", field="toolkit")
        kit = kits[0]
        connection = await store.toolkit_connection(conn, kit.id)
        mode = (await store.toolkit_egress(conn, kit.id))["connection_mode"]
    return connections.Kit(kit.id, kit.slug, kit.project, kit.source_kind, connection, mode)


def _per_user(kit: connections.Kit) -> None:
    if kit.mode != "per_user":
        raise InvalidParams(
            f"toolkit {kit.slug!r} uses one shared credential: there is nothing to connect", field="toolkit"
        )


def _schemes(kit: connections.Kit, spec_schemes: Mapping[str, Any]) -> list[str]:
    transport = (kit.connection or {}).get("transport")
    if kit.source_kind == "mcp":
        return ["oauth", "bearer", "header", "basic"] if transport in ("http", "sse") else []
    if kit.source_kind == "openapi":
        declared = connections.declared_flow(spec_schemes) is not None
        return (["oauth"] if declared else []) + list(connections.STATIC_SCHEMES)
    return []


# The same fields as a stored connection's ``public()``: every listing row has each of them.
_NOT_CONNECTED: dict[str, Any] = {
    "connected": False,
    "status": "not_connected",
    "scheme": None,
    "scopes": [],
    "expires_at": None,
    "connected_at": None,
    "updated_at": None,
}


async def mine(rt: Runtime, actor: Principal, *, user: int | str | None = None) -> dict[str, Any]:
    """Every ``per_user`` toolkit the user sees, with the user's status there."""
    who = await _target(rt, actor, user)
    per_user = await connections.per_user_ids(rt)
    async with rt.db.read() as conn:
        subject = actor if who == actor.user_id else None

        def listing(r: Any) -> Any:
            scope = visibility.scope_in(r, subject) if subject is not None else None
            return store.list_toolkits_in(r, scope=scope)

        kits = [k for k in await conn.batch(listing) if k.id in per_user]
        held = await vault_conns.of_user(conn, who)
        out = []
        for k in kits:
            connection = await store.toolkit_connection(conn, k.id)
            kit = connections.Kit(k.id, k.slug, k.project, k.source_kind, connection, "per_user")
            spec_schemes = (await store.toolkit_egress(conn, k.id))["security_schemes"]
            stored = held.get(k.id)
            status = stored.public() if stored is not None else _NOT_CONNECTED
            out.append(
                {
                    "toolkit": k.slug,
                    "project": k.project,
                    "title": k.title,
                    "schemes": _schemes(kit, spec_schemes),
                    "connect_url": connections.connect_url(rt, k.slug, k.project),
                    **status,
                }
            )
    return {"connections": out}


async def start(
    rt: Runtime,
    actor: Principal,
    slug: str,
    project: str,
    *,
    user: int | str | None = None,
    session_hash: str | None = None,
) -> dict[str, Any]:
    """OAuth: the authorization URL to open (kept until the callback, 10 minutes)."""
    who = await _target(rt, actor, user)
    kit = await _kit(rt, actor, slug, project, who=who)
    _per_user(kit)
    return await connections.start(rt, kit, who, session_hash=session_hash)


async def set_own(
    rt: Runtime,
    actor: Principal,
    slug: str,
    project: str,
    doc: Mapping[str, Any],
    *,
    user: int | str | None = None,
) -> dict[str, Any]:
    """The user's own token, key or Basic pair for the toolkit (write-only): their status."""
    who = await _target(rt, actor, user)
    kit = await _kit(rt, actor, slug, project, who=who)
    _per_user(kit)
    status = await connections.set_own(rt, kit, who, doc)
    return {"toolkit": kit.slug, "project": kit.project, **status}


async def disconnect(
    rt: Runtime, actor: Principal, slug: str, project: str, *, user: int | str | None = None
) -> dict[str, Any]:
    """Revoke (where the authorization server offers it) and delete the user's connection."""
    who = await _target(rt, actor, user)
    kit = await _kit(rt, actor, slug, project, who=who)
    return await connections.disconnect(rt, kit, who)


async def set_mode(rt: Runtime, actor: Principal, slug: str, project: str, mode: Any) -> dict[str, Any]:
    """The toolkit's connection mode (its owner or an admin)."""
    if mode not in store.CONNECTION_MODES:
        raise InvalidParams(f"'mode' must be one of {', '.join(store.CONNECTION_MODES)}", field="mode")
    kit_id = await managed_toolkit(rt, actor, slug, check_project(project))
    async with rt.db.write() as tx:
        await store.set_connection_mode(tx, kit_id, mode)
    await rt.mcp.discard(f"{project}.{slug}")  # a shared session must not serve per-user calls
    return await toolkit_connections(rt, actor, slug, project)


async def toolkit_connections(rt: Runtime, actor: Principal, slug: str, project: str) -> dict[str, Any]:
    """The toolkit's mode and who is connected (names, status, scopes, expiry; no value)."""
    kit_id = await managed_toolkit(rt, actor, slug, check_project(project))
    async with rt.db.read() as conn:
        mode = (await store.toolkit_egress(conn, kit_id))["connection_mode"]
        who = await vault_conns.who(conn, kit_id)
    return {"toolkit": slug, "project": project, "mode": mode, "connected": who}


_CLIENT_METHODS = ("none", "client_secret_basic", "client_secret_post")


async def set_client(
    rt: Runtime, actor: Principal, slug: str, project: str, doc: Mapping[str, Any]
) -> dict[str, Any]:
    """The OAuth client registered for an OpenAPI toolkit's spec-declared flow (its owner or
    an admin): ``client_id``, an optional ``client_secret`` (sealed, write-only) and
    ``auth_method`` (default ``client_secret_basic`` with a secret, else ``none``)."""
    kit_id = await managed_toolkit(rt, actor, slug, check_project(project))
    client_id, secret = doc.get("client_id"), doc.get("client_secret")
    if not isinstance(client_id, str) or not client_id.strip() or len(client_id) > 512:
        raise InvalidParams(
            "'client_id' must be the client id registered with the authorization server", field="client_id"
        )
    if secret is not None and (not isinstance(secret, str) or not secret or len(secret) > 512):
        raise InvalidParams("'client_secret' must be a non-empty string", field="client_secret")
    method = doc.get("auth_method") or ("client_secret_basic" if secret else "none")
    if method not in _CLIENT_METHODS or (method != "none") != bool(secret):
        raise InvalidParams(
            f"'auth_method' must be one of {', '.join(_CLIENT_METHODS)}; none without a secret, "
            "a client_secret_* method with one",
            field="auth_method",
        )
    async with rt.db.read() as conn:
        schemes = (await store.toolkit_egress(conn, kit_id))["security_schemes"]
    if connections.declared_flow(schemes) is None:
        raise InvalidParams(
            f"toolkit {slug!r}: its spec declares no OAuth 2.0 authorization-code flow to use a client with",
            field="toolkit",
        )
    async with rt.db.write() as tx:
        await vault_conns.put_client(tx, rt.vault, kit_id, client_id.strip(), method, secret)
    return await oauth_client(rt, actor, slug, project)


async def oauth_client(rt: Runtime, actor: Principal, slug: str, project: str) -> dict[str, Any]:
    """The toolkit's spec-declared flow and its client (id and method; never the secret)."""
    kit_id = await managed_toolkit(rt, actor, slug, check_project(project))
    async with rt.db.read() as conn:
        schemes = (await store.toolkit_egress(conn, kit_id))["security_schemes"]
        held = await vault_conns.get_client(conn, rt.vault, kit_id)
    return {
        "toolkit": slug,
        "project": project,
        "flow": connections.declared_flow(schemes),
        "client": held[0].public() if held is not None else None,
    }


async def clear_client(rt: Runtime, actor: Principal, slug: str, project: str) -> dict[str, Any]:
    kit_id = await managed_toolkit(rt, actor, slug, check_project(project))
    async with rt.db.write() as tx:
        removed = await vault_conns.delete_client(tx, kit_id)
    return {"toolkit": slug, "project": project, "cleared": removed}
