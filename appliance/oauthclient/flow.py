"""The authorization code flow with PKCE, and the token endpoint's grants.

``begin`` builds the authorization request (PKCE S256, a fresh ``state``, RFC 8707's
``resource``, the scopes chosen by the caller) and records what its answer is checked
against: the ``state``, and the issuer of the validated metadata (RFC 9207).
``code_from`` checks the redirect's parameters in the specification's order (state, then
``iss`` as the 2026-07-28 table says, with simple string comparison, and only then an
``error``), before any code goes to a token endpoint. ``exchange``, ``refresh``,
``client_credentials`` and ``jwt_bearer`` (RFC 7523 §2.1; its assertion from ``id_jag``, an
RFC 8693 exchange at the person's IdP, for SEP-990) call the token endpoint with the
client authentication the identity carries (none, ``client_secret_basic``,
``client_secret_post`` or ``private_key_jwt``, RFC 7523 §2.2). A token answer must be a JSON
object with a bearer ``access_token``; nothing else it says is kept.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from appliance.egress.transport import Egress
from appliance.errors import UpstreamError
from appliance.oauthclient import jose
from appliance.oauthclient.challenge import scopes_of
from appliance.oauthclient.discovery import ServerMetadata
from appliance.oauthclient.documents import MAX_DOCUMENT, OAuthRefused, host_of, post
from appliance.oauthclient.identity import JWT_BEARER, ClientIdentity, EnterpriseIdp
from appliance.secret import Secret

DEFAULT_LIFETIME_S = 3600.0  # no expires_in: RFC 6749 leaves it to the server
_MAX_TOKEN = 16384
_MAX_LIFETIME_S = 366 * 86400.0
_MAX_NONCE = 1024
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"  # RFC 8693
ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"  # SEP-990's identity assertion grant


@dataclass(frozen=True)
class TokenSet:
    access: Secret
    expires_at: float
    refresh: Secret | None = None
    scopes: tuple[str, ...] = ()
    kind: str = "Bearer"  # or "DPoP": bound to the connection's key (RFC 9449 §5)


class Dpop:
    """One connection's DPoP key (ES256, made here, never stored) and the nonces servers gave."""

    def __init__(self) -> None:
        self.key = jose.SigningKey.generate()
        self.nonces: dict[str, str] = {}  # origin -> the last DPoP-Nonce it sent (RFC 9449 §8, §9)

    def proof(self, method: str, url: str, access_token: Secret | None = None) -> str:
        nonce = self.nonces.get(_origin(url))
        return jose.dpop_proof(self.key, method, url, access_token=access_token, nonce=nonce)

    def learn(self, url: str, nonce: str | None) -> bool:
        """Keep a server's new nonce; True when it is one we have not used yet."""
        if not nonce or len(nonce) > _MAX_NONCE or not nonce.isascii() or not nonce.isprintable():
            return False
        origin = _origin(url)
        fresh = self.nonces.get(origin) != nonce
        self.nonces[origin] = nonce
        return fresh


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


@dataclass(frozen=True)
class Pending:
    """One authorization request in flight: its URL and what its answer must match."""

    url: str
    state: str
    verifier: Secret
    redirect_uri: str
    resource: str
    scopes: tuple[str, ...]
    identity: ClientIdentity
    server: ServerMetadata


def _challenge(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def begin(
    server: ServerMetadata,
    identity: ClientIdentity,
    *,
    redirect_uri: str,
    resource: str,
    scopes: tuple[str, ...],
) -> Pending:
    verifier = secrets.token_urlsafe(64)  # 86 characters of the unreserved set (RFC 7636 §4.1)
    state = secrets.token_urlsafe(32)
    query = [
        ("response_type", "code"),
        ("client_id", identity.client_id),
        ("redirect_uri", redirect_uri),
        ("code_challenge", _challenge(verifier)),
        ("code_challenge_method", "S256"),
        ("state", state),
    ]
    if resource:  # RFC 8707; an OpenAPI spec's flow names no resource (issue 19, item 4)
        query.append(("resource", resource))
    if scopes:
        query.append(("scope", " ".join(scopes)))
    endpoint = server.authorization_endpoint
    joiner = "&" if "?" in endpoint else "?"
    url = endpoint + joiner + urlencode(query, quote_via=quote)
    return Pending(url, state, Secret(verifier), redirect_uri, resource, scopes, identity, server)


def code_from(pending: Pending, params: Mapping[str, str]) -> Secret:
    """The authorization code of the redirect ``params``, after every check; else OAuthRefused."""
    state = params.get("state")
    if not isinstance(state, str) or not hmac.compare_digest(state.encode(), pending.state.encode()):
        raise OAuthRefused("the authorization response does not carry our state; ignored", step="callback")
    iss = params.get("iss")
    recorded = pending.server.issuer
    comparable = recorded is not None or not pending.server.spec_declared  # a spec names no issuer
    if iss is not None and iss != recorded and comparable:  # RFC 9207 §2.4, no normalisation
        raise OAuthRefused(
            "the authorization response comes from another issuer than the one we asked (RFC 9207); "
            "its code is not used",
            step="callback",
        )
    if iss is None and pending.server.iss_parameter_supported:
        raise OAuthRefused(
            "the authorization response lacks the iss its server promised (RFC 9207); its code is not used",
            step="callback",
        )
    error = params.get("error")
    if error is not None:
        code = error if error.replace("_", "").isalpha() and len(error) <= 40 else "invalid"
        raise OAuthRefused(f"the authorization was refused ({code})", step="callback", error=code)
    code_value = params.get("code")
    if not isinstance(code_value, str) or not code_value or len(code_value) > _MAX_TOKEN:
        raise OAuthRefused("the authorization response carries no code", step="callback")
    return Secret(code_value)


def _authenticated(identity: ClientIdentity, form: dict[str, str], audience: str) -> dict[str, str]:
    """Put the client's authentication on a token request; the headers it needs.

    ``audience`` is the authorization server as a ``private_key_jwt`` assertion names it (its
    issuer, else the endpoint the request goes to: RFC 7523 §3).
    """
    if identity.auth_method == "client_secret_basic" and identity.client_secret is not None:
        # RFC 6749 §2.3.1: both parts form-urlencoded before the Basic encoding.
        pair = f"{quote(identity.client_id, safe='')}:{quote(identity.client_secret.reveal(), safe='')}"
        return {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}
    form["client_id"] = identity.client_id
    if identity.auth_method == "private_key_jwt" and identity.private_key is not None:
        key = jose.SigningKey.from_pem(identity.private_key)
        form["client_assertion_type"] = jose.ASSERTION_TYPE
        form["client_assertion"] = jose.client_assertion(key, identity.client_id, audience).reveal()
    if identity.auth_method == "client_secret_post" and identity.client_secret is not None:
        form["client_secret"] = identity.client_secret.reveal()
    return {}


def tokens_from(
    doc: dict[str, Any], where: str, requested: tuple[str, ...], now: float, *, dpop: bool = False
) -> TokenSet:
    """The token answer's tokens; a DPoP-bound one only when we sent a proof (``dpop``)."""
    access = doc.get("access_token")
    kind = doc.get("token_type")
    if not isinstance(access, str) or not access or len(access) > _MAX_TOKEN:
        raise OAuthRefused(f"{where} answered without an access_token", step="token")
    kinds = ("bearer", "dpop") if dpop else ("bearer",)
    if not isinstance(kind, str) or kind.lower() not in kinds:
        raise OAuthRefused(f"{where} answered a token that is not a bearer token", step="token")
    expires = doc.get("expires_in")
    lifetime = DEFAULT_LIFETIME_S
    if isinstance(expires, int | float) and not isinstance(expires, bool) and expires > 0:
        lifetime = min(float(expires), _MAX_LIFETIME_S)
    refresh = doc.get("refresh_token")
    if refresh is not None and (not isinstance(refresh, str) or not refresh or len(refresh) > _MAX_TOKEN):
        raise OAuthRefused(f"{where} answered a malformed refresh_token", step="token")
    scope = doc.get("scope")
    granted = scopes_of(scope) if isinstance(scope, str) else requested
    return TokenSet(
        Secret(access),
        now + lifetime,
        Secret(refresh) if refresh else None,
        granted,
        "DPoP" if kind.lower() == "dpop" else "Bearer",
    )


async def _token(
    egress: Egress,
    server: ServerMetadata,
    identity: ClientIdentity,
    form: dict[str, str],
    requested: tuple[str, ...],
    endpoint: str | None = None,
    dpop: Dpop | None = None,
) -> TokenSet:
    """One token request; with ``dpop``, a proof on it and one retry on ``use_dpop_nonce``."""
    url = endpoint or server.token_endpoint
    if not form.get("resource"):
        form.pop("resource", None)
    headers = _authenticated(identity, form, server.issuer or url)
    for attempt in range(2):
        if dpop is not None:
            headers["DPoP"] = dpop.proof("POST", url)
        try:
            doc = await post(egress, url, "token request", form=dict(form), headers=headers)
            break
        except OAuthRefused as exc:
            # RFC 9449 §8: the server wants its nonce in the proof; once, and only a new one.
            if (
                dpop is None
                or attempt
                or exc.error != "use_dpop_nonce"
                or not dpop.learn(url, exc.dpop_nonce)
            ):
                raise
            if "client_assertion" in form:  # an assertion is single-use: a fresh one for the retry
                headers = _authenticated(identity, form, server.issuer or url)
    return tokens_from(
        doc, f"the token endpoint of {host_of(url)}", requested, time.time(), dpop=dpop is not None
    )


async def exchange(egress: Egress, pending: Pending, code: Secret, dpop: Dpop | None = None) -> TokenSet:
    form = {
        "grant_type": "authorization_code",
        "code": code.reveal(),
        "redirect_uri": pending.redirect_uri,
        "code_verifier": pending.verifier.reveal(),
        "resource": pending.resource,
    }
    return await _token(egress, pending.server, pending.identity, form, pending.scopes, dpop=dpop)


async def refresh(
    egress: Egress,
    server: ServerMetadata,
    identity: ClientIdentity,
    tokens: TokenSet,
    resource: str,
    dpop: Dpop | None = None,
) -> TokenSet:
    if tokens.refresh is None:
        raise OAuthRefused("there is no refresh token to refresh with", step="token")
    form = {"grant_type": "refresh_token", "refresh_token": tokens.refresh.reveal(), "resource": resource}
    fresh = await _token(egress, server, identity, form, tokens.scopes, server.refresh_endpoint, dpop)
    if fresh.refresh is None:  # RFC 6749 §6: the old refresh token stays valid unless replaced
        fresh = TokenSet(fresh.access, fresh.expires_at, tokens.refresh, fresh.scopes, fresh.kind)
    return fresh


async def client_credentials(
    egress: Egress,
    server: ServerMetadata,
    identity: ClientIdentity,
    resource: str,
    scopes: tuple[str, ...],
    dpop: Dpop | None = None,
) -> TokenSet:
    form = {"grant_type": "client_credentials", "resource": resource}
    if scopes:
        form["scope"] = " ".join(scopes)
    return await _token(egress, server, identity, form, scopes, dpop=dpop)


async def id_jag(
    egress: Egress, idp: EnterpriseIdp, server: ServerMetadata, resource: str, scopes: tuple[str, ...]
) -> Secret:
    """SEP-990: exchange the person's ID token at their IdP (RFC 8693) for an identity
    assertion grant (ID-JAG) naming ``server`` (its issuer) and ``resource``."""
    if server.issuer is None:
        raise OAuthRefused(
            "an identity assertion grant needs the authorization server's issuer", step="token"
        )
    form = {
        "grant_type": TOKEN_EXCHANGE,
        "requested_token_type": ID_JAG,
        "subject_token": idp.id_token.reveal(),
        "subject_token_type": ID_TOKEN,
        "audience": server.issuer,
        "resource": resource,
        "client_id": idp.client_id,
    }
    if scopes:
        form["scope"] = " ".join(scopes)
    doc = await post(egress, idp.token_endpoint, "token exchange", form=form)
    grant = doc.get("access_token")
    if (
        doc.get("issued_token_type") != ID_JAG
        or not isinstance(grant, str)
        or not grant
        or len(grant) > _MAX_TOKEN
    ):
        raise OAuthRefused(
            f"the identity provider {host_of(idp.token_endpoint)} answered no identity assertion grant",
            step="token exchange",
        )
    return Secret(grant)


async def jwt_bearer(
    egress: Egress,
    server: ServerMetadata,
    identity: ClientIdentity,
    resource: str,
    scopes: tuple[str, ...],
    dpop: Dpop | None = None,
) -> TokenSet:
    """RFC 7523 §2.1: the identity's JWT (a workload's, issued by its platform) as the grant.

    A refusal is final: the same assertion will not do better, and no other grant is tried
    in its place (SEP-1933).
    """
    assertion = identity.assertion
    if assertion is None and identity.idp is not None:
        assertion = await id_jag(egress, identity.idp, server, resource, scopes)
    if assertion is None:
        raise OAuthRefused("the client has no JWT to present for the jwt-bearer grant", step="token")
    form = {"grant_type": JWT_BEARER, "assertion": assertion.reveal(), "resource": resource}
    if scopes:
        form["scope"] = " ".join(scopes)
    return await _token(egress, server, identity, form, scopes, dpop=dpop)


async def revoke(
    egress: Egress, server: ServerMetadata, identity: ClientIdentity, token: Secret, hint: str
) -> bool:
    """RFC 7009: ask the server to revoke ``token`` (``hint``: refresh_token or access_token).

    True when it answered 200; False when it offers no revocation endpoint. A refusal is an
    ``OAuthRefused`` naming the status only (the answer may echo what we sent).
    """
    if server.revocation_endpoint is None:
        return False
    form = {"token": token.reveal(), "token_type_hint": hint}
    headers = {
        "Accept": "application/json",
        "Content-Type": "application/x-www-form-urlencoded",
        **_authenticated(identity, form, server.issuer or server.revocation_endpoint),
    }
    try:
        answer = await egress.send(
            "POST",
            server.revocation_endpoint,
            headers=headers,
            content=urlencode(form).encode(),
            max_bytes=MAX_DOCUMENT,
        )
    except UpstreamError as exc:  # the guard's and the transport's reasons are client-safe
        raise OAuthRefused(
            f"OAuth revocation at {host_of(server.revocation_endpoint)} failed: {exc.public_message}",
            step="revocation",
        ) from exc
    if answer.status != 200:
        raise OAuthRefused(
            f"the revocation endpoint of {host_of(server.revocation_endpoint)} answered HTTP {answer.status}",
            step="revocation",
            status=answer.status,
        )
    return True
