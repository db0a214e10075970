"""Who the appliance is to an authorization server, in the MCP specification's order.

1. A client pre-registered with that authorization server (bound to its ``issuer``: never
   offered to another one, 2026-07-28 "Authorization Server Binding");
2. the appliance's Client ID Metadata Document, when the server says it fetches them
   (``client_id_metadata_document_supported``) and the appliance has an https URL for it;
3. dynamic client registration (RFC 7591), deprecated, as the fallback.

The Client ID Metadata Document itself (``document``) is what ``/oauth/client-metadata.json``
serves: its ``client_id`` is the URL it is published at, its one redirect URI the appliance's
``/oauth/callback``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from appliance.config import Settings
from appliance.egress.transport import Egress
from appliance.oauthclient.discovery import ServerMetadata
from appliance.oauthclient.documents import OAuthRefused, host_of, post
from appliance.secret import Secret

CALLBACK_PATH = "/oauth/callback"
DOCUMENT_PATH = "/oauth/client-metadata.json"
CLIENT_NAME = "toolspoke"
# Ours, in our order of preference; a method the server does not list is never used.
_WITH_SECRET = ("client_secret_basic", "client_secret_post")
METHODS = (*_WITH_SECRET, "none")
_MAX_ID = 512
_FIRST_USE = "\0pre-registered"  # the key of a pre-registered client bound on first use
# RFC 7523 §2.1: a JWT as the authorization grant (workload identity federation, SEP-1933)
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


@dataclass(frozen=True)
class EnterpriseIdp:
    """Enterprise-managed authorization (SEP-990): the identity provider that turns the
    person's ID token into an identity assertion grant (ID-JAG) for an authorization server."""

    token_endpoint: str  # the IdP's, for the RFC 8693 token exchange
    client_id: str  # the appliance's client at the IdP
    id_token: Secret  # the person's ID token from their single sign-on


@dataclass(frozen=True)
class PreRegistered:
    """A client registered with one authorization server beforehand (by its operator)."""

    issuer: str | None  # None: bound to the first authorization server it is used with
    client_id: str
    client_secret: Secret | None = None
    auth_method: str | None = None  # None: what the server supports, Basic first
    grant: str = "authorization_code"  # or "client_credentials", JWT_BEARER (no person involved)
    private_key: Secret | None = None  # PEM: private_key_jwt (RFC 7523 §2.2) instead of a secret
    assertion: Secret | None = None  # JWT_BEARER: the workload's JWT, issued by its platform
    idp: EnterpriseIdp | None = None  # JWT_BEARER: the assertion comes from this IdP's exchange


@dataclass(frozen=True)
class ClientProfile:
    """What the appliance can say about itself to any authorization server."""

    redirect_uri: str | None = None  # None: no public URL, no authorization code flow
    metadata_url: str | None = None  # the Client ID Metadata Document's URL (https, a path)
    preregistered: tuple[PreRegistered, ...] = ()
    client_name: str = CLIENT_NAME

    @classmethod
    def from_settings(
        cls, settings: Settings, preregistered: tuple[PreRegistered, ...] = ()
    ) -> ClientProfile:
        base = settings.public_url
        redirect = f"{base}{CALLBACK_PATH}" if base else None
        metadata = settings.oauth_client_metadata_url or (f"{base}{DOCUMENT_PATH}" if base else None)
        if metadata is not None and not is_client_id_url(metadata):
            metadata = None  # http, or no path: not a usable client_id (the document is still served)
        return cls(redirect_uri=redirect, metadata_url=metadata, preregistered=preregistered)


@dataclass(frozen=True)
class ClientIdentity:
    client_id: str
    client_secret: Secret | None
    auth_method: str  # client_secret_basic, client_secret_post, private_key_jwt or none
    how: str  # preregistered, cimd or dcr
    issuer: str | None
    grant: str = "authorization_code"
    private_key: Secret | None = None  # PEM, for private_key_jwt
    assertion: Secret | None = None  # the JWT a JWT_BEARER grant presents
    idp: EnterpriseIdp | None = None  # else the IdP that issues it (SEP-990)


def is_client_id_url(url: str) -> bool:
    """An https URL with a path and no fragment (the CIMD draft's client_id rules)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return (
        parts.scheme == "https"
        and bool(parts.hostname)
        and parts.path not in ("", "/")
        and not parts.fragment
    )


def document(settings: Settings) -> dict[str, Any] | None:
    """The appliance's Client ID Metadata Document; None without a public URL."""
    base = settings.public_url
    if not base:
        return None
    client_id = settings.oauth_client_metadata_url or f"{base}{DOCUMENT_PATH}"
    return {
        "client_id": client_id,
        "client_name": CLIENT_NAME,
        "client_uri": base,
        "redirect_uris": [f"{base}{CALLBACK_PATH}"],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }


def _method(server: ServerMetadata, secret: bool, wanted: str | None = None) -> str:
    offered = (wanted,) if wanted else ((*_WITH_SECRET, "none") if secret else ("none",))
    for method in offered:
        if method in server.token_endpoint_auth_methods and (method == "none" or secret):
            return method
    raise OAuthRefused(
        f"the authorization server {host_of(server.token_endpoint)} accepts no client authentication "
        f"we can use (it lists {', '.join(server.token_endpoint_auth_methods)[:120] or 'none'})",
        step="registration",
    )


def _application_type(redirect_uri: str) -> str:
    host = urlsplit(redirect_uri).hostname or ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    return "native" if loopback else "web"


def _identity(server: ServerMetadata, pre: PreRegistered, issuer: str) -> ClientIdentity:
    if pre.private_key is not None:  # a key is used only as private_key_jwt, never offered as none
        method = _method(server, True, pre.auth_method or "private_key_jwt")
    else:
        method = _method(server, pre.client_secret is not None, pre.auth_method)
    return ClientIdentity(
        pre.client_id,
        pre.client_secret,
        method,
        "preregistered",
        issuer,
        pre.grant,
        pre.private_key,
        pre.assertion,
        pre.idp,
    )


async def identify(
    egress: Egress, server: ServerMetadata, profile: ClientProfile, registered: dict[str, ClientIdentity]
) -> ClientIdentity:
    """The identity to use with ``server``; ``registered`` keeps registrations per issuer."""
    key = server.issuer or server.token_endpoint
    for pre in profile.preregistered:
        if pre.issuer is None and server.issuer is not None:
            # Bound on first use to the server the upstream's metadata named; never offered
            # to another one afterwards (the upstream moving to a new server is an error).
            bound = registered.setdefault(_FIRST_USE, _identity(server, pre, server.issuer))
            if bound.issuer != server.issuer:
                raise OAuthRefused(
                    f"the upstream now names the authorization server {host_of(server.issuer)}, not the "
                    "one its pre-registered client belongs to; configure a client for the new one",
                    step="registration",
                )
            return bound
        if server.issuer is not None and pre.issuer == server.issuer:
            return _identity(server, pre, server.issuer)
    if server.cimd_supported and profile.metadata_url and profile.redirect_uri:
        return ClientIdentity(profile.metadata_url, None, "none", "cimd", server.issuer)
    if key in registered:
        return registered[key]
    if server.registration_endpoint is None:
        raise OAuthRefused(
            f"the authorization server {host_of(server.token_endpoint)} takes no Client ID Metadata "
            "Document we can offer (set TOOLSPOKE_PUBLIC_URL to an https URL) and no dynamic "
            "registration; register a client there and configure it",
            step="registration",
        )
    if not profile.redirect_uri:
        raise OAuthRefused(
            "dynamic client registration needs a redirect URI: set TOOLSPOKE_PUBLIC_URL", step="registration"
        )
    wanted = _method(server, True)
    answer = await post(
        egress,
        server.registration_endpoint,
        "client registration",
        body={
            "client_name": profile.client_name,
            "redirect_uris": [profile.redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": wanted,
            "application_type": _application_type(profile.redirect_uri),
        },
        ok=(200, 201),
    )
    client_id = answer.get("client_id")
    secret = answer.get("client_secret")
    method = answer.get("token_endpoint_auth_method", wanted)
    where = f"the registration answer of {host_of(server.registration_endpoint)}"
    if not isinstance(client_id, str) or not client_id or len(client_id) > _MAX_ID:
        raise OAuthRefused(f"{where} has no valid client_id", step="registration")
    if secret is not None and (not isinstance(secret, str) or not secret or len(secret) > _MAX_ID):
        raise OAuthRefused(f"{where} has a malformed client_secret", step="registration")
    if method not in METHODS:
        raise OAuthRefused(f"{where} names a client authentication we do not speak", step="registration")
    if method != "none" and secret is None:
        raise OAuthRefused(f"{where} asks for {method} but issued no client_secret", step="registration")
    identity = ClientIdentity(client_id, Secret(secret) if secret else None, method, "dcr", server.issuer)
    registered[key] = identity
    return identity
