"""Connections (issue 19): each person's own credential behind a ``per_user`` toolkit.

A toolkit's ``connection_mode`` is ``shared`` (its one credential, ``gateway/credentials``)
or ``per_user``: then every call carries the credential of the calling principal's user
(an agent acts for its user), sealed in the vault per (toolkit, user)
(``vault/connections.py``), and never anyone else's.

- ``require`` is the pipeline's gate before anything is reserved or sent: a caller whose
  user has no working connection is refused with ``ConnectionRequired`` naming the toolkit
  and the console page where the user connects.
- ``prepare`` is the credential stage: the toolkit's ``PreparedCall`` with the user's
  credential in place of the shared one, a pool key of that user's own (an MCP session is
  never shared between users), and, for OAuth, the ``UserOAuth`` that answers the
  upstream's challenges.
- ``UserOAuth`` holds one user's tokens for one toolkit: refreshed ahead of expiry and once
  on a 401, each new set sealed at once; a refresh that fails marks only that user's
  connection ``needs_reconnect`` (the toolkit's health is not touched).
- ``start``/``finish`` are the authorization code flow through ``oauthclient``: discovery,
  client identity, PKCE and ``resource``; the request kept in ``oauth_pending`` bound to the
  console session that started it (or, headless, to the user alone) until ``/oauth/callback``
  brings the code back. An OpenAPI toolkit whose spec declares an authorization-code flow
  skips discovery: the flow's endpoints (each vetted by the egress guard, https unless
  ALLOWED_TOOL_CIDRS opens the address) and the client its owner set (``oauth_clients``).
  ``disconnect`` revokes at the authorization server (RFC 7009) when
  it offers revocation, then deletes the sealed tokens.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from appliance.catalogue import store
from appliance.db import ReadConn
from appliance.egress.auth import Authorizer, Placement, UpstreamAuth
from appliance.errors import ConnectionRequired, InvalidParams, InvalidRequest, UpstreamError
from appliance.gateway import credentials
from appliance.gateway.credentials import PreparedCall
from appliance.gateway.runtime import Runtime
from appliance.models import Principal, Tool
from appliance.oauthclient import challenge, discovery, flow, identity
from appliance.oauthclient.documents import OAuthRefused
from appliance.secret import Secret
from appliance.vault import connections as vault_conns
from appliance.vault.crypto import SealError

log = logging.getLogger(__name__)

CONSOLE_PATH = "/console/connections"
PENDING_S = 600.0  # an authorization not completed within this is forgotten
EARLY_S = 60.0  # refresh this long before the access token's stated expiry
STATIC_SCHEMES = ("bearer", "header", "basic", "query", "cookie")
_PER_USER = ("per_user_toolkits",)


def connect_url(rt: Runtime, slug: str, project: str) -> str:
    """The console page where a person connects this toolkit (absolute with a public URL)."""
    path = f"{CONSOLE_PATH}?toolkit={quote(slug, safe='')}&project={quote(project, safe='')}"
    base = rt.settings.public_url
    return f"{base}{path}" if base else path


def required(rt: Runtime, slug: str, project: str, *, why: str = "has no connection") -> ConnectionRequired:
    url = connect_url(rt, slug, project)
    return ConnectionRequired(
        f"toolkit {slug!r} (project {project!r}) acts as each person, and your user {why}: "
        f"connect it at {url}, then call again. Nothing was sent.",
        data={"toolkit": slug, "project": project, "connect_url": url},
    )


async def per_user_ids(rt: Runtime) -> set[int]:
    """Every ``per_user`` toolkit's id, remembered until the database changes."""

    async def load(conn: ReadConn) -> set[int]:
        return await conn.batch(store.per_user_toolkits_in)

    return await rt.db.cached(_PER_USER, load)


async def statuses(rt: Runtime, user_id: int) -> dict[int, str]:
    """Toolkit id → the status of each of this user's connections (remembered likewise)."""

    async def load(conn: ReadConn) -> dict[int, str]:
        return await conn.batch(lambda r: vault_conns.statuses_in(r, user_id))

    return await rt.db.cached(("user_connection_statuses", user_id), load)


async def require(rt: Runtime, principal: Principal, tool: Tool) -> None:
    """Stage (before reserve): a ``per_user`` toolkit's call needs the user's working connection."""
    if tool.toolkit_id not in await per_user_ids(rt):
        return
    status = (await statuses(rt, principal.user_id)).get(tool.toolkit_id)
    if status == vault_conns.CONNECTED and not principal.operator and not principal.anonymous:
        return
    why = "needs to reconnect" if status == vault_conns.NEEDS_RECONNECT else "has no connection"
    raise required(rt, tool.toolkit, tool.project, why=why)


async def search_marks(rt: Runtime, principal: Principal | None) -> dict[int, bool]:
    """For search results: per ``per_user`` toolkit id, whether the caller is connected."""
    kits = await per_user_ids(rt)
    if not kits:
        return {}
    mine = await statuses(rt, principal.user_id) if principal is not None else {}
    return {k: mine.get(k) == vault_conns.CONNECTED for k in kits}


def pool_key(tool: Tool, user_id: int) -> str:
    """The MCP pool's key of one user's session with one toolkit (never shared)."""
    return f"{tool.project}.{tool.toolkit}~u{user_id}"


# -- the call path ---------------------------------------------------------------------------


async def prepare(rt: Runtime, tool: Tool, principal: Principal) -> PreparedCall:
    """Stage: the call's credential: the toolkit's, or in ``per_user`` mode the user's own."""
    prepared = await credentials.prepare(rt, tool)
    if prepared.mode != "per_user":
        return prepared
    stored, fields = await _opened(rt, tool.toolkit_id, principal.user_id)
    if stored is None or stored.status != vault_conns.CONNECTED or principal.operator:
        raise required(rt, tool.toolkit, tool.project)
    prepared.auth, prepared.authorizer = None, None
    prepared.pool_key = pool_key(tool, principal.user_id)
    if stored.scheme == "oauth":
        user_oauth = _user_oauth(rt, stored, fields)
        await user_oauth.fresh(tool)  # ahead of expiry: before anything is sent
        prepared.personal = user_oauth.secrets()
        if tool.source_kind == "mcp":
            prepared.http_auth = user_oauth
        else:
            prepared.auth = UpstreamAuth("bearer", value=user_oauth.tokens.access)
            prepared.authorizer = UserAuthorizer(user_oauth, rt, prepared.pool_key)
            return prepared
    else:
        prepared.auth = credentials.to_auth(stored.scheme, stored.settings, fields)
    if prepared.auth is not None and tool.source_kind == "openapi":
        prepared.authorizer = Authorizer(prepared.auth, rt.tokens, prepared.pool_key)
    return prepared


class UserAuthorizer(Authorizer):
    """An OpenAPI call's placement of one user's OAuth access token: on a 401 the token is
    refreshed once and the request sent again, as the MCP client does (``UserOAuth.challenged``);
    a refresh that fails marks that user's connection and the 401 stands."""

    def __init__(self, user_oauth: UserOAuth, rt: Runtime, key: str) -> None:
        super().__init__(UpstreamAuth("bearer", value=user_oauth.tokens.access), rt.tokens, key)
        self.user_oauth = user_oauth

    @property
    def refreshable(self) -> bool:
        return True

    async def placement(self, egress: Any, *, after_401: bool = False) -> Placement:
        token = self.user_oauth.tokens.access
        self._used.append(token)
        return Placement(headers={"Authorization": f"Bearer {token.reveal()}"})

    async def after_401(self, egress: Any, www_authenticate: str | None) -> Placement | None:
        sent = {"Authorization": f"Bearer {self._used[-1].reveal()}"} if self._used else {}
        if not await self.user_oauth.challenged(401, www_authenticate, sent):
            return None
        return await self.placement(egress)

    def access_tokens(self) -> list[str]:
        return sorted({t.reveal() for t in self._used})


async def _opened(
    rt: Runtime, toolkit_id: int, user_id: int
) -> tuple[vault_conns.StoredConnection | None, dict[str, str]]:
    async def load(conn: ReadConn) -> tuple[vault_conns.StoredConnection | None, dict[str, str]]:
        stored = await conn.batch(lambda r: vault_conns.get_in(r, toolkit_id, user_id))
        if stored is None:
            return None, {}
        try:
            return stored, await vault_conns.open_connection(conn, rt.vault, stored)
        except SealError:
            raise UpstreamError(
                "your stored connection to this toolkit cannot be decrypted; connect it again; "
                "nothing was sent",
                reason="connection_required",
                sent=False,
            ) from None

    return await rt.db.cached(("user_connection", toolkit_id, user_id), load)


@dataclass(frozen=True)
class Grant:
    """What a user's OAuth connection was granted by, from its plain settings."""

    server: discovery.ServerMetadata
    identity: identity.ClientIdentity
    resource: str


def _grant(settings: Mapping[str, Any], client_secret: str | None) -> Grant:
    server = discovery.ServerMetadata(
        issuer=settings.get("issuer"),
        authorization_endpoint=str(settings.get("authorization_endpoint", "")),
        token_endpoint=str(settings["token_endpoint"]),
        revocation_endpoint=settings.get("revocation_endpoint"),
        token_endpoint_auth_methods=tuple(settings.get("token_endpoint_auth_methods") or ("none",)),
        iss_parameter_supported=bool(settings.get("iss_parameter_supported")),
        refresh_endpoint=settings.get("refresh_endpoint"),
        spec_declared=bool(settings.get("spec_declared")),
    )
    ident = identity.ClientIdentity(
        client_id=str(settings["client_id"]),
        client_secret=Secret(client_secret) if client_secret else None,
        auth_method=str(settings.get("auth_method", "none")),
        how=str(settings.get("client_how", "dcr")),
        issuer=settings.get("issuer"),
    )
    return Grant(server, ident, str(settings["resource"]))


def _settings_of(grant: Grant, redirect_uri: str = "") -> dict[str, Any]:
    server, ident = grant.server, grant.identity
    return {
        "issuer": server.issuer,
        "authorization_endpoint": server.authorization_endpoint,
        "token_endpoint": server.token_endpoint,
        "revocation_endpoint": server.revocation_endpoint,
        "token_endpoint_auth_methods": list(server.token_endpoint_auth_methods),
        "iss_parameter_supported": server.iss_parameter_supported,
        **({"refresh_endpoint": server.refresh_endpoint} if server.refresh_endpoint else {}),
        **({"spec_declared": True} if server.spec_declared else {}),
        "client_id": ident.client_id,
        "auth_method": ident.auth_method,
        "client_how": ident.how,
        "resource": grant.resource,
        **({"redirect_uri": redirect_uri} if redirect_uri else {}),
    }


def _user_oauth(rt: Runtime, stored: vault_conns.StoredConnection, fields: dict[str, str]) -> UserOAuth:
    key = (stored.toolkit_id, stored.user_id)
    held = rt.user_oauth.get(key)
    if isinstance(held, UserOAuth) and held.generation >= stored.updated_at:
        return held  # ours is as new as the row (we sealed it) or newer
    grant = _grant(stored.settings, fields.get("client_secret"))
    tokens = flow.TokenSet(
        access=Secret(fields["access_token"]),
        expires_at=stored.expires_at or (time.time() + flow.DEFAULT_LIFETIME_S),
        refresh=Secret(fields["refresh_token"]) if fields.get("refresh_token") else None,
        scopes=stored.scopes,
    )
    fresh = UserOAuth(rt, stored.toolkit_id, stored.user_id, grant, tokens, stored.updated_at)
    rt.user_oauth[key] = fresh
    return fresh


class UserOAuth:
    """One user's OAuth tokens for one toolkit: the MCP client's ``HttpAuth`` on their calls."""

    def __init__(
        self, rt: Runtime, toolkit_id: int, user_id: int, grant: Grant, tokens: flow.TokenSet, generation: str
    ) -> None:
        self.rt = rt
        self.toolkit_id = toolkit_id
        self.user_id = user_id
        self.grant = grant
        self.tokens = tokens
        self.generation = generation  # the row's updated_at this object's tokens match (or beat)
        self.refreshes = 0
        self.broken = False
        self._refreshed: Secret | None = None  # the access token a 401 already refreshed
        self._lock = asyncio.Lock()

    def secrets(self) -> tuple[str, ...]:
        held = [self.tokens.access, self.tokens.refresh]
        return tuple(s.reveal() for s in held if s is not None)

    async def fresh(self, tool: Tool) -> None:
        """Refresh ahead of expiry; a failed refresh refuses the call (nothing was sent)."""
        async with self._lock:
            if self.broken:
                raise required(self.rt, tool.toolkit, tool.project, why="needs to reconnect")
            if self.tokens.expires_at - EARLY_S > time.time() or self.tokens.refresh is None:
                return
            if not await self._refresh():
                raise required(self.rt, tool.toolkit, tool.project, why="needs to reconnect")

    async def headers(self, method: str, url: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens.access.reveal()}"}

    async def challenged(
        self, status: int, www_authenticate: str | None, sent: dict[str, str], dpop_nonce: str | None = None
    ) -> bool:
        """A 401 refreshes once per access token; anything else is the upstream's answer."""
        async with self._lock:
            if sent.get("Authorization") != f"Bearer {self.tokens.access.reveal()}":
                return True  # another call already replaced the token this one carried
            found = challenge.bearer(www_authenticate)
            if status != 401 or self.tokens.refresh is None or self._refreshed == self.tokens.access:
                if status == 401 or (found is not None and found.error == "invalid_token"):
                    await self._mark(vault_conns.NEEDS_RECONNECT)
                return False
            self._refreshed = self.tokens.access
            return await self._refresh()

    async def _refresh(self) -> bool:
        grant = self.grant
        started = time.perf_counter()
        try:
            tokens = await flow.refresh(
                self.rt.egress, grant.server, grant.identity, self.tokens, grant.resource
            )
        except OAuthRefused as exc:
            log.warning(
                "connection of user %d to toolkit %d: refresh failed (%s); it needs reconnecting",
                self.user_id,
                self.toolkit_id,
                exc.public_message,
            )
            await self._mark(vault_conns.NEEDS_RECONNECT)
            return False
        self.tokens = tokens
        self.refreshes += 1
        self.last_refresh_s = time.perf_counter() - started
        await self._seal()
        return True

    async def _seal(self) -> None:
        tokens = self.tokens
        fields = {"access_token": tokens.access.reveal()}
        if tokens.refresh is not None:
            fields["refresh_token"] = tokens.refresh.reveal()
        if self.grant.identity.client_secret is not None:
            fields["client_secret"] = self.grant.identity.client_secret.reveal()
        async with self.rt.db.write() as tx:
            if await vault_conns.get(tx, self.toolkit_id, self.user_id) is None:
                return  # disconnected meanwhile: nothing is brought back
            await vault_conns.put(
                tx,
                self.rt.vault,
                self.toolkit_id,
                self.user_id,
                "oauth",
                _settings_of(self.grant),
                fields,
                scopes=tokens.scopes,
                expires_at=tokens.expires_at,
            )
            row = await vault_conns.get(tx, self.toolkit_id, self.user_id)
        if row is not None:
            self.generation = row.updated_at

    async def _mark(self, status: str) -> None:
        self.broken = True
        async with self.rt.db.write() as tx:
            await vault_conns.mark(tx, self.toolkit_id, self.user_id, status)
        self.rt.user_oauth.pop((self.toolkit_id, self.user_id), None)


# -- connecting ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kit:
    id: int
    slug: str
    project: str
    source_kind: str
    connection: dict[str, Any] | None
    mode: str


async def profile(rt: Runtime) -> identity.ClientProfile:
    return identity.ClientProfile.from_settings(rt.settings)


async def start(rt: Runtime, kit: Kit, user_id: int, *, session_hash: str | None) -> dict[str, Any]:
    """Begin an authorization for ``user_id`` to ``kit``: its URL, kept until the callback."""
    url = _oauth_url(kit) if kit.source_kind != "openapi" else ""
    client = await profile(rt)
    if not client.redirect_uri:
        raise InvalidRequest(
            "connecting with OAuth needs the appliance's public URL for its callback: set "
            "TOOLSPOKE_PUBLIC_URL (the authorization server sends the browser back there)"
        )
    if kit.source_kind == "openapi":
        server, ident, scopes = await _declared(rt, kit)
        resource = ""  # the spec's flow names no RFC 8707 resource: none is sent
    else:
        server, ident, resource, scopes = await _discovered(rt, url, client)
    if ident.grant != "authorization_code":
        raise InvalidParams("this toolkit's client does not use the authorization code flow", field="toolkit")
    pending = flow.begin(server, ident, redirect_uri=client.redirect_uri, resource=resource, scopes=scopes)
    settings = {**_settings_of(Grant(server, ident, resource), client.redirect_uri), "scopes": list(scopes)}
    sealed = {"verifier": pending.verifier.reveal()}
    if ident.client_secret is not None:
        sealed["client_secret"] = ident.client_secret.reveal()
    async with rt.db.write() as tx:
        await vault_conns.hold(
            tx,
            rt.vault,
            pending.state,
            toolkit_id=kit.id,
            user_id=user_id,
            session_hash=session_hash,
            settings=settings,
            sealed=sealed,
            lifetime_s=PENDING_S,
        )
    return {
        "toolkit": kit.slug,
        "project": kit.project,
        "authorization_url": pending.url,
        "redirect_uri": client.redirect_uri,
        "expires_in": int(PENDING_S),
    }


async def _discovered(
    rt: Runtime, url: str, client: identity.ClientProfile
) -> tuple[discovery.ServerMetadata, identity.ClientIdentity, str, tuple[str, ...]]:
    """A remote MCP toolkit's authorization server and client identity, discovered."""
    prm = await discovery.resource_metadata(rt.egress, url, None)
    if prm is None:
        server = await discovery.legacy_server(rt.egress, url)
        resource, supported = url, None
    else:
        server = await discovery.server_metadata(rt.egress, prm.authorization_servers[0])
        resource, supported = prm.resource, prm.scopes_supported
    scopes = tuple(supported or ())
    if server.scopes_supported and "offline_access" in server.scopes_supported:
        scopes = tuple(dict.fromkeys((*scopes, "offline_access")))  # a refresh token, if allowed
    ident = await identity.identify(rt.egress, server, client, rt.oauth_registered)
    return server, ident, resource, scopes


def declared_flow(schemes: Mapping[str, Any]) -> dict[str, Any] | None:
    """The OAuth 2.0 authorization-code flow an OpenAPI spec declares (kept at import)."""
    for scheme in schemes.values():
        if isinstance(scheme, dict) and isinstance(scheme.get("authorization_code"), dict):
            return dict(scheme["authorization_code"])
    return None


async def _declared(
    rt: Runtime, kit: Kit
) -> tuple[discovery.ServerMetadata, identity.ClientIdentity, tuple[str, ...]]:
    """An OpenAPI toolkit's spec-declared flow with the client its operator set for it.

    No discovery: the spec names the endpoints. The spec is untrusted, so each endpoint goes
    through the egress guard (and again, resolved and pinned, when it is used), and must be
    https unless ALLOWED_TOOL_CIDRS opens its address."""
    async with rt.db.read() as conn:
        schemes = (await store.toolkit_egress(conn, kit.id))["security_schemes"]
        held = await vault_conns.get_client(conn, rt.vault, kit.id)
    declared = declared_flow(schemes)
    if declared is None:
        raise InvalidParams(
            f"toolkit {kit.slug!r}: its spec declares no OAuth 2.0 authorization-code flow; "
            "set your own token or key instead",
            field="scheme",
        )
    endpoints = {
        key: _spec_endpoint(rt, kit, str(declared[key]), key)
        for key in ("authorization_url", "token_url", "refresh_url")
        if declared.get(key)
    }
    if held is None:
        raise InvalidRequest(
            f"toolkit {kit.slug!r} connects through the OAuth flow its spec declares, but no OAuth "
            f"client is set for it: its owner or an admin sets the client id registered at "
            f"{urlsplit(endpoints['authorization_url']).hostname} (`toolspoke connections client "
            f"{kit.slug} --client-id ID [--secret-env VAR]`, "
            f"or PUT /api/v1/toolkits/{kit.slug}/oauth-client)",
            field="client_id",
        )
    stored, secret = held
    server = discovery.ServerMetadata(
        issuer=None,
        authorization_endpoint=endpoints["authorization_url"],
        token_endpoint=endpoints["token_url"],
        refresh_endpoint=endpoints.get("refresh_url"),
        token_endpoint_auth_methods=(stored.auth_method,),
        grant_types=("authorization_code", "refresh_token"),
        spec_declared=True,
    )
    ident = identity.ClientIdentity(
        stored.client_id, Secret(secret) if secret else None, stored.auth_method, "preregistered", None
    )
    return server, ident, tuple(str(s) for s in declared.get("scopes") or ())


def _spec_endpoint(rt: Runtime, kit: Kit, url: str, field: str) -> str:
    """A spec-named OAuth endpoint the egress guard accepts; else a refusal naming why."""
    where = f"toolkit {kit.slug!r}: its spec's OAuth {field}"
    try:
        parsed = rt.egress.check_url(url, field=field)
    except UpstreamError as exc:
        raise UpstreamError(
            f"{where} is refused by the egress guard: {exc.public_message}; nothing was stored",
            reason="ssrf_blocked",
            field=field,
            data={**(exc.data or {}), "field": field},
        ) from exc
    if parsed.scheme != "https" and not rt.egress.policy.opens(parsed.host):
        raise UpstreamError(
            f"{where} is plain http ({parsed.host}); OAuth endpoints must use https unless "
            "ALLOWED_TOOL_CIDRS opens their address; nothing was stored",
            reason="ssrf_blocked",
            field=field,
            data={"rule": "https", "field": field},
        )
    return url


def _oauth_url(kit: Kit) -> str:
    connection = kit.connection or {}
    if kit.source_kind != "mcp" or connection.get("transport") not in ("http", "sse"):
        raise InvalidParams(
            "OAuth connections are for remote MCP toolkits; set your own token or key instead", field="scheme"
        )
    return str(connection.get("url", ""))


async def in_session(rt: Runtime, state: str | None) -> bool:
    """Whether the authorization ``state`` names must be finished in a console session.

    The console's cookie is ``SameSite=Strict`` and kept to ``/console``: a browser sent back
    by an authorization server (another site) does not carry it to ``/oauth/callback``. So
    the callback hands such an authorization on to ``/console/connections/finish``, a
    navigation from our own page, which does carry it, and ``finish`` checks it there."""
    if not isinstance(state, str) or not state or len(state) > 200:
        return False
    async with rt.db.read() as conn:
        return bool(await vault_conns.bound(conn, state))


async def finish(rt: Runtime, params: Mapping[str, str], *, session_hash: str | None) -> dict[str, Any]:
    """The callback: the authorization ``params`` name checked, the code exchanged, the
    tokens sealed for the user who started it. Which toolkit and user it was is returned."""
    state = params.get("state")
    if not isinstance(state, str) or not state or len(state) > 200:
        raise InvalidRequest("this is not an answer to an authorization we asked for")
    async with rt.db.write() as tx:
        row = await vault_conns.take(tx, rt.vault, state)
    if row is None:
        raise InvalidRequest("this authorization is unknown or expired (10 minutes); start connecting again")
    if row.session_hash is not None and not hmac.compare_digest(row.session_hash, session_hash or ""):
        raise InvalidRequest(
            "this authorization was started in another console session; start connecting again from yours"
        )
    grant = _grant(row.settings, row.sealed.get("client_secret"))
    pending = flow.Pending(
        url="",
        state=state,
        verifier=Secret(row.sealed["verifier"]),
        redirect_uri=str(row.settings["redirect_uri"]),
        resource=grant.resource,
        scopes=tuple(row.settings.get("scopes") or ()),
        identity=grant.identity,
        server=grant.server,
    )
    code = flow.code_from(pending, params)
    tokens = await flow.exchange(rt.egress, pending, code)
    await _store_tokens(rt, row.toolkit_id, row.user_id, grant, tokens)
    async with rt.db.read() as conn:
        named = await store.toolkit_identity(conn, row.toolkit_id)
    slug, project = named or ("", "")
    return {"toolkit": slug, "project": project, "user_id": row.user_id, "scopes": list(tokens.scopes)}


async def _store_tokens(
    rt: Runtime, toolkit_id: int, user_id: int, grant: Grant, tokens: flow.TokenSet
) -> None:
    fields = {"access_token": tokens.access.reveal()}
    if tokens.refresh is not None:
        fields["refresh_token"] = tokens.refresh.reveal()
    if grant.identity.client_secret is not None:
        fields["client_secret"] = grant.identity.client_secret.reveal()
    async with rt.db.write() as tx:
        await vault_conns.put(
            tx,
            rt.vault,
            toolkit_id,
            user_id,
            "oauth",
            _settings_of(grant),
            fields,
            scopes=tokens.scopes,
            expires_at=tokens.expires_at,
        )
    await forget(rt, toolkit_id, user_id)


async def set_own(rt: Runtime, kit: Kit, user_id: int, doc: Mapping[str, Any]) -> dict[str, Any]:
    """The user's own token, key or Basic pair (write-only); its public status."""
    scheme = doc.get("scheme")
    if scheme not in STATIC_SCHEMES:
        raise InvalidParams(f"'scheme' must be one of {', '.join(STATIC_SCHEMES)}", field="scheme")
    kind = str((kit.connection or {}).get("transport", "")) if kit.source_kind == "mcp" else kit.source_kind
    async with rt.db.read() as conn:
        schemes = (await store.toolkit_egress(conn, kit.id))["security_schemes"]
    cred = credentials.parse_credential(rt, doc, kind=kind, spec_schemes=schemes)
    async with rt.db.write() as tx:
        await vault_conns.put(tx, rt.vault, kit.id, user_id, cred.scheme, cred.settings, cred.plain())
        stored = await vault_conns.get(tx, kit.id, user_id)
    await forget(rt, kit.id, user_id)
    assert stored is not None
    return stored.public()


async def disconnect(rt: Runtime, kit: Kit, user_id: int) -> dict[str, Any]:
    """Revoke at the authorization server when it offers revocation, then delete the tokens."""
    async with rt.db.read() as conn:
        stored = await vault_conns.get(conn, kit.id, user_id)
        fields = await vault_conns.open_connection(conn, rt.vault, stored) if stored is not None else {}
    revoked: bool | None = None
    if stored is not None and stored.scheme == "oauth":
        grant = _grant(stored.settings, fields.get("client_secret"))
        revoked = False
        try:
            for hint in ("refresh_token", "access_token"):
                token = fields.get(hint)
                if token:
                    revoked = await flow.revoke(rt.egress, grant.server, grant.identity, Secret(token), hint)
        except OAuthRefused as exc:
            log.warning("disconnecting user %d from toolkit %d: %s", user_id, kit.id, exc.public_message)
            revoked = False
    async with rt.db.write() as tx:
        removed = await vault_conns.delete(tx, kit.id, user_id)
    await forget(rt, kit.id, user_id)
    return {"toolkit": kit.slug, "project": kit.project, "disconnected": removed, "revoked": revoked}


async def forget(rt: Runtime, toolkit_id: int, user_id: int) -> None:
    """Drop what this process holds of a user's connection: its tokens and pooled sessions."""
    rt.user_oauth.pop((toolkit_id, user_id), None)
    async with rt.db.read() as conn:
        row = await store.toolkit_identity(conn, toolkit_id)
    if row is not None:
        await rt.mcp.discard(f"{row[1]}.{row[0]}~u{user_id}")
