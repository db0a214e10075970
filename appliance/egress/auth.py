"""Upstream credentials on the wire: where each scheme puts its secret, and what to redact.

``UpstreamAuth`` is an opened vault credential (every secret part wrapped in ``Secret``).
``Authorizer`` puts it on one call's request: a header (Bearer, API key, Basic), a query
parameter or a cookie, or an OAuth 2.0 access token (``oauth.py``) refreshed once when the
upstream answers 401. It also knows every form the secrets may come back in (the Basic
``user:pass`` base64, the access tokens it used), so the gateway can redact echoes.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

from appliance.egress.oauth import OAuthGrant, OnRotated, TokenCache
from appliance.egress.transport import Egress
from appliance.errors import InvalidParams
from appliance.secret import Redactor, Secret

SCHEMES = ("bearer", "header", "query", "cookie", "basic", "oauth2", "env")
# Remote MCP servers take a header (issue 3: none, Bearer or an API-key header; Basic too);
# stdio servers take environment variables.
MCP_HTTP_SCHEMES = ("bearer", "header", "basic")
MCP_STDIO_SCHEMES = ("env",)


@dataclass(frozen=True)
class UpstreamAuth:
    scheme: str
    name: str = ""  # header, query or cookie name
    value: Secret | None = None  # bearer token or API key
    username: Secret | None = None
    password: Secret | None = None
    oauth: OAuthGrant | None = None
    env: tuple[tuple[str, Secret], ...] = ()  # stdio: variables for the child

    def secrets(self) -> list[str]:
        """Every secret value and derived form an upstream could echo back.

        A Basic user name and an OAuth client id are not secrets on their own (an upstream
        may well say "hello, bot"); they are redacted as part of the ``user:pass`` pair.
        """
        out = [s.reveal() for s in (self.value, self.password) if s is not None]
        if self.username is not None and self.password is not None:
            out.append(self._basic_pair())
        if self.oauth is not None:
            out.append(self.oauth.refresh_token.reveal())
            if self.oauth.client_secret is not None:
                out.append(self.oauth.client_secret.reveal())
        out += [v.reveal() for _, v in self.env]
        return out

    def _basic_pair(self) -> str:
        assert self.username is not None and self.password is not None
        return f"{self.username.reveal()}:{self.password.reveal()}"

    def static_headers(self) -> dict[str, str]:
        """The headers of a scheme that needs no token endpoint (remote MCP servers)."""
        if self.scheme == "bearer" and self.value is not None:
            return {"Authorization": f"Bearer {self.value.reveal()}"}
        if self.scheme == "header" and self.value is not None:
            return {self.name: self.value.reveal()}
        if self.scheme == "basic":
            pair = base64.b64encode(self._basic_pair().encode()).decode()
            return {"Authorization": f"Basic {pair}"}
        if self.scheme in ("oauth2", "query", "cookie"):
            raise InvalidParams(f"scheme {self.scheme!r} cannot be sent as a fixed header", field="scheme")
        return {}


@dataclass
class Placement:
    headers: dict[str, str] = field(default_factory=dict)
    query: list[tuple[str, str]] = field(default_factory=list)
    cookies: dict[str, str] = field(default_factory=dict)


class Authorizer:
    """One call's credential: placed on the request, refreshed once after a 401 (OAuth)."""

    def __init__(
        self, auth: UpstreamAuth, tokens: TokenCache, key: str, *, on_rotated: OnRotated | None = None
    ) -> None:
        self.auth = auth
        self.tokens = tokens
        self.key = key
        self.on_rotated = on_rotated
        self._used: list[Secret] = []  # access tokens this call put on the wire

    @property
    def refreshable(self) -> bool:
        return self.auth.oauth is not None

    async def placement(self, egress: Egress, *, after_401: bool = False) -> Placement:
        auth = self.auth
        if auth.scheme == "query" and auth.value is not None:
            return Placement(query=[(auth.name, auth.value.reveal())])
        if auth.scheme == "cookie" and auth.value is not None:
            return Placement(cookies={auth.name: auth.value.reveal()})
        if auth.oauth is not None:
            stale = self._used[-1] if self._used else None
            token = await self.tokens.access_token(
                egress, self.key, auth.oauth, force=after_401, stale=stale, on_rotated=self.on_rotated
            )
            self._used.append(token)
            return Placement(headers={"Authorization": f"Bearer {token.reveal()}"})
        return Placement(headers=auth.static_headers())

    async def after_401(self, egress: Egress, www_authenticate: str | None) -> Placement | None:
        """The placement to send the request again with after a 401 (None: do not)."""
        return await self.placement(egress, after_401=True)

    def access_tokens(self) -> list[str]:
        """The OAuth access tokens this call used or the cache holds (not vault secrets, so
        the gateway adds them to the vault's needles for this call's answer)."""
        known = self.tokens.current(self.key)
        tokens = {t.reveal() for t in self._used} | ({known.reveal()} if known is not None else set())
        return sorted(tokens)

    def redactor(self) -> Redactor:
        return Redactor([*self.auth.secrets(), *self.access_tokens()])
