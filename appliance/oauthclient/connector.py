"""One MCP connection's OAuth state: its tokens, refreshed and re-authorized when challenged.

The MCP client (``mcpclient/http_transport.py``) asks ``headers()`` before each request and
tells ``challenged()`` about a 401 or 403; a True answer means "send it again, the token
changed". The rules:

- a token due within ``EARLY_S`` is refreshed before use, when there is a refresh token;
- a 401 refreshes once per token, then authorizes afresh (discovery from the challenge);
- a 403 ``insufficient_scope`` steps up: the union of the scopes asked so far and the
  challenged ones (2026-07-28, "Step-Up Authorization Flow"), only when it asks for a scope
  not yet asked for, and at most ``MAX_STEP_UPS`` times per connector;
- at most ``MAX_AUTHORIZATIONS`` authorizations per connector, whatever the server says.

The authorization step itself is ``authorize``: handed the ``Pending`` request (its URL),
it returns the redirect's query parameters. In production that is a person's browser and
the appliance's ``/oauth/callback`` (later work); nothing here opens or fetches that URL.
A ``PreRegistered`` client with the ``client_credentials`` grant, or a workload's JWT for the
jwt-bearer grant (RFC 7523 §2.1), needs no person at all.
Tokens live only in this object, as ``Secret``s; nothing is kept of a failed attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from appliance.egress.transport import Egress
from appliance.oauthclient import challenge as challenges
from appliance.oauthclient import discovery, flow, jose
from appliance.oauthclient.documents import OAuthRefused
from appliance.oauthclient.identity import JWT_BEARER, ClientIdentity, ClientProfile, identify
from appliance.secret import Secret

EARLY_S = 60.0  # refresh this long before the stated expiry
MAX_STEP_UPS = 2
MAX_AUTHORIZATIONS = 3
Authorize = Callable[[flow.Pending], Awaitable[Mapping[str, str]]]


@dataclass(frozen=True)
class Grant:
    """Where the current tokens came from: what a refresh needs."""

    server: discovery.ServerMetadata
    identity: ClientIdentity
    resource: str


class OAuthConnector:
    """OAuth for one upstream MCP server URL (the ``HttpAuth`` the MCP client takes)."""

    def __init__(
        self,
        egress: Egress,
        server_url: str,
        profile: ClientProfile,
        authorize: Authorize,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.egress = egress
        self.server_url = server_url
        self.profile = profile
        self.authorize = authorize
        self.clock = clock
        self.tokens: flow.TokenSet | None = None
        self.grant: Grant | None = None
        self.requested: tuple[str, ...] = ()  # every scope asked for so far
        self.authorizations = 0
        self.step_ups = 0
        self.refreshes = 0
        self._refreshed: Secret | None = None  # the token a 401 already refreshed
        self._registered: dict[str, ClientIdentity] = {}
        self._lock = asyncio.Lock()
        # RFC 9449: made when an authorization server first offers ES256 DPoP, for this
        # connection only; its tokens are then bound to it and sent with a proof each time.
        self.dpop: flow.Dpop | None = None

    def secrets(self) -> list[str]:
        """Every token this connector holds, for redaction."""
        held = [self.tokens.access, self.tokens.refresh] if self.tokens else []
        return [s.reveal() for s in held if s is not None]

    def _authorization(self) -> str | None:
        return f"{self.tokens.kind} {self.tokens.access.reveal()}" if self.tokens else None

    async def headers(self, method: str = "POST", url: str = "") -> dict[str, str]:
        async with self._lock:
            tokens = self.tokens
            if (
                tokens is not None
                and tokens.refresh is not None
                and tokens.expires_at - EARLY_S <= self.clock()
            ):
                # Still valid: used as it is; expired: dropped, and the 401 authorizes afresh.
                with contextlib.suppress(OAuthRefused):
                    await self._refresh()
            if self.tokens is None:
                return {}
            out = {"Authorization": f"{self.tokens.kind} {self.tokens.access.reveal()}"}
            if self.tokens.kind == "DPoP" and self.dpop is not None:
                out["DPoP"] = self.dpop.proof(method, url or self.server_url, self.tokens.access)
            return out

    async def challenged(
        self, status: int, www_authenticate: str | None, sent: dict[str, str], dpop_nonce: str | None = None
    ) -> bool:
        """True when the request should be sent again with fresh ``headers()``."""
        found = challenges.bearer(www_authenticate)
        async with self._lock:
            if self.tokens is not None and sent.get("Authorization") != self._authorization():
                return True  # another request already replaced the token it carried
            if (
                status == 401
                and found is not None
                and found.error == "use_dpop_nonce"
                and self.dpop is not None
                and "DPoP" in sent
            ):
                # RFC 9449 §9: send again with the server's nonce, only when it is a new one.
                return self.dpop.learn(self.server_url, dpop_nonce)
            if status == 401:
                if (
                    self.tokens is not None
                    and self.tokens.refresh is not None
                    and self._refreshed != self.tokens.access
                ):
                    self._refreshed = self.tokens.access
                    try:
                        await self._refresh()
                        return True
                    except OAuthRefused:
                        pass  # the refresh token is spent: authorize afresh
                await self._authorize(found, found.scopes if found else ())
                return True
            if status == 403 and found is not None and found.error == "insufficient_scope":
                wanted = found.scopes
                if not wanted or set(wanted) <= set(self.requested) or self.step_ups >= MAX_STEP_UPS:
                    return False  # asking again for what we asked cannot help: a permanent refusal
                self.step_ups += 1
                union = tuple(dict.fromkeys((*self.requested, *wanted)))
                await self._authorize(found, union)
                return True
            return False

    async def _refresh(self) -> None:
        assert self.tokens is not None and self.grant is not None
        grant = self.grant
        try:
            self.tokens = await flow.refresh(
                self.egress, grant.server, grant.identity, self.tokens, grant.resource, self.dpop
            )
            self.refreshes += 1
        except OAuthRefused:
            self.tokens = None if self.tokens.expires_at <= self.clock() else self.tokens
            raise

    async def _authorize(self, found: challenges.Challenge | None, scopes: tuple[str, ...]) -> None:
        if self.authorizations >= MAX_AUTHORIZATIONS:
            raise OAuthRefused(
                f"the upstream still refuses after {MAX_AUTHORIZATIONS} authorizations; giving up",
                step="authorization",
            )
        self.authorizations += 1
        hinted = found.resource_metadata if found else None
        prm = await discovery.resource_metadata(self.egress, self.server_url, hinted)
        if prm is None:
            server = await discovery.legacy_server(self.egress, self.server_url)
            resource = self.server_url
            supported = None
        else:
            server = await discovery.server_metadata(self.egress, prm.authorization_servers[0])
            resource = prm.resource
            supported = prm.scopes_supported
        if not scopes and supported:
            scopes = supported  # the 2025-11-25 order: the challenge's scope, else scopes_supported
        if scopes and server.scopes_supported and "offline_access" in server.scopes_supported:
            scopes = tuple(dict.fromkeys((*scopes, "offline_access")))  # a refresh token, if the AS allows
        identity = await identify(self.egress, server, self.profile, self._registered)
        if self.dpop is None and jose.ALGORITHM in server.dpop_algs:
            self.dpop = flow.Dpop()
        dpop = self.dpop if jose.ALGORITHM in server.dpop_algs else None
        if identity.grant == "client_credentials":
            tokens = await flow.client_credentials(self.egress, server, identity, resource, scopes, dpop)
        elif identity.grant == JWT_BEARER:
            tokens = await flow.jwt_bearer(self.egress, server, identity, resource, scopes, dpop)
        else:
            if not self.profile.redirect_uri:
                raise OAuthRefused(
                    "authorizing needs the appliance's public URL for its callback: set TOOLSPOKE_PUBLIC_URL",
                    step="authorization",
                )
            pending = flow.begin(
                server, identity, redirect_uri=self.profile.redirect_uri, resource=resource, scopes=scopes
            )
            params = await self.authorize(pending)
            tokens = await flow.exchange(self.egress, pending, flow.code_from(pending, params), dpop)
        self.requested = tuple(dict.fromkeys((*self.requested, *scopes)))
        self.tokens, self.grant, self._refreshed = tokens, Grant(server, identity, resource), None
