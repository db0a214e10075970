"""OAuth 2.0 for upstreams, non-interactive: a stored refresh token → short-lived access tokens.

The token endpoint is called through the same ``Egress`` as every tool call (SSRF guard,
pinned address, deadline, byte cap; RELIABILITY SSRF-09 d). An access token is cached per
toolkit until shortly before it expires; a 401 from the upstream forces one refresh
(``Authorizer`` in ``auth.py``). Concurrent calls share one refresh. A rotated refresh token
(RFC 6749 §6: the server may issue a new one) is handed to ``on_rotated`` so the vault keeps
the current one. Nothing the token endpoint says is shown verbatim: its body may echo
the secrets we sent, so only a well-formed ``error`` code is quoted.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from urllib.parse import quote, urlencode

import orjson

from appliance.egress.transport import Egress
from appliance.errors import UpstreamError
from appliance.secret import Secret

_EARLY_S = 30.0  # refresh this long before the stated expiry (clock skew, slow calls)
_DEFAULT_LIFETIME_S = 3600.0  # a token without expires_in: RFC 6749 leaves it to the server
_ERROR_CODE = re.compile(r"[a-z_]{1,40}")
OnRotated = Callable[[Secret], Awaitable[None]]


@dataclass(frozen=True)
class OAuthGrant:
    """What the vault holds for an OAuth 2.0 client with a refresh token."""

    token_url: str
    client_id: Secret
    refresh_token: Secret
    client_secret: Secret | None = None
    scope: str = ""
    client_auth: str = "basic"  # client_secret_basic (RFC 6749 §2.3.1) or "post"


@dataclass
class _Held:
    grant: OAuthGrant
    token: Secret
    expires_at: float
    refresh_token: Secret  # the newest one (the server may rotate it at each refresh)
    lineage: list[Secret]  # every refresh token of this grant so far: still "the same credential"

    def matches(self, grant: OAuthGrant) -> bool:
        """``grant`` is this credential: same client, and a refresh token we have held."""
        same_client = replace(grant, refresh_token=self.grant.refresh_token) == self.grant
        return same_client and grant.refresh_token in self.lineage


class TokenCache:
    """Access tokens per toolkit key; one refresh at a time per key."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._held: dict[str, _Held] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.refreshes = 0  # token endpoint calls made (tests and figures read it)

    def current(self, key: str) -> Secret | None:
        held = self._held.get(key)
        return held.token if held is not None else None

    def drop(self, key: str) -> None:
        self._held.pop(key, None)

    async def access_token(
        self,
        egress: Egress,
        key: str,
        grant: OAuthGrant,
        *,
        force: bool = False,
        stale: Secret | None = None,
        on_rotated: OnRotated | None = None,
    ) -> Secret:
        """A valid access token; ``force`` refreshes unless another call already replaced ``stale``."""
        async with self._locks.setdefault(key, asyncio.Lock()):
            held = self._held.get(key)
            if held is not None and not held.matches(grant):
                held = None  # the owner changed the credential
            if held is not None:
                fresh = held.expires_at > self.clock()
                replaced = stale is not None and held.token != stale
                if (fresh and not force) or (force and replaced):
                    return held.token
            refresh = held.refresh_token if held is not None else grant.refresh_token
            token, lifetime, rotated = await self._refresh(egress, grant, refresh)
            if rotated is not None and rotated != refresh and on_rotated is not None:
                await on_rotated(rotated)
            lineage = held.lineage if held is not None else [grant.refresh_token]
            if rotated is not None and rotated not in lineage:
                lineage = [*lineage[-7:], rotated]  # the vault now holds it: the next grant will
            self._held[key] = _Held(
                grant=held.grant if held is not None else grant,
                token=token,
                expires_at=self.clock() + max(0.0, lifetime - _EARLY_S),
                refresh_token=rotated or refresh,
                lineage=lineage,
            )
            return token

    async def _refresh(
        self, egress: Egress, grant: OAuthGrant, refresh: Secret
    ) -> tuple[Secret, float, Secret | None]:
        self.refreshes += 1
        form = {"grant_type": "refresh_token", "refresh_token": refresh.reveal()}
        if grant.scope:
            form["scope"] = grant.scope
        headers = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}
        if grant.client_auth == "post" or grant.client_secret is None:
            form["client_id"] = grant.client_id.reveal()
            if grant.client_secret is not None:
                form["client_secret"] = grant.client_secret.reveal()
        else:
            # RFC 6749 §2.3.1: both parts form-urlencoded before the Basic encoding.
            user, password = grant.client_id.reveal(), grant.client_secret.reveal()
            pair = f"{quote(user, safe='')}:{quote(password, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        answer = await egress.send("POST", grant.token_url, headers=headers, content=urlencode(form).encode())
        try:
            doc = orjson.loads(answer.body) if answer.body else None
        except orjson.JSONDecodeError:
            doc = None
        if answer.status != 200 or not isinstance(doc, dict):
            code = doc.get("error") if isinstance(doc, dict) else None
            said = f" ({code})" if isinstance(code, str) and _ERROR_CODE.fullmatch(code) else ""
            raise UpstreamError(
                f"the OAuth token endpoint refused to refresh the access token: HTTP {answer.status}{said}",
                reason="credential_unavailable",
                data={"status": answer.status},
            )
        token = doc.get("access_token")
        kind = doc.get("token_type", "bearer")
        if not isinstance(token, str) or not token or not isinstance(kind, str) or kind.lower() != "bearer":
            raise UpstreamError(
                "the OAuth token endpoint answered without a bearer access_token",
                reason="credential_unavailable",
            )
        expires = doc.get("expires_in")
        lifetime = _DEFAULT_LIFETIME_S
        if isinstance(expires, int | float) and not isinstance(expires, bool) and expires > 0:
            lifetime = float(expires)
        rotated = doc.get("refresh_token")
        return Secret(token), lifetime, Secret(rotated) if isinstance(rotated, str) and rotated else None
