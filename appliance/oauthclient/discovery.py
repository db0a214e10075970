"""Where an MCP server's authorization lives: RFC 9728, then RFC 8414 / OpenID discovery.

Protected-resource metadata comes from the challenge's ``resource_metadata`` URL, else the
well-known locations (path-inserted first, then the root; RFC 9728 §3.1). Its ``resource``
must name the server we talk to (RFC 9728 §3.3: same origin, and a path that is the
server's or above it) or nothing proceeds. The authorization server's metadata is tried at
the locations the MCP specification lists, in its order (path insertion for RFC 8414 and
OpenID Connect, then path appending for OpenID Connect), and used only when its ``issuer``
is exactly the identifier we built the URL from (RFC 8414 §3.3). A server that publishes no
protected-resource metadata is read as a 2025-03-26 server: metadata at its origin, else
the default ``/authorize``, ``/token`` and ``/register`` endpoints there.

Every URL the metadata names is vetted by the egress guard here already (a literal internal
address is refused before anything is sent) and again, resolved and pinned, on each request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from appliance.egress.transport import Egress
from appliance.errors import UpstreamError
from appliance.oauthclient.documents import OAuthRefused, get_json, host_of

_MAX_LIST = 100  # entries of a metadata list we read, at most
_AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")


@dataclass(frozen=True)
class ResourceMetadata:
    resource: str  # exactly as published: sent as RFC 8707's ``resource``
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] | None
    url: str | None  # where it was read; None for a server without one (2025-03-26)


@dataclass(frozen=True)
class ServerMetadata:
    issuer: str | None  # None only for the 2025-03-26 default endpoints
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str | None = None
    scopes_supported: tuple[str, ...] | None = None
    token_endpoint_auth_methods: tuple[str, ...] = ("client_secret_basic",)  # RFC 8414 default
    grant_types: tuple[str, ...] = ("authorization_code", "implicit")  # RFC 8414 default
    cimd_supported: bool = False
    iss_parameter_supported: bool = False
    revocation_endpoint: str | None = None  # RFC 7009, when the server offers it
    dpop_algs: tuple[str, ...] = ()  # RFC 9449 §5.1 dpop_signing_alg_values_supported
    # An OpenAPI spec's own ``authorizationCode`` flow (issue 19, item 4): endpoints declared,
    # not discovered; no issuer is known, so an ``iss`` in the answer cannot be compared.
    refresh_endpoint: str | None = None  # the spec's ``refreshUrl``; None: the token endpoint
    spec_declared: bool = False


def _split(url: str) -> tuple[str, str, str]:
    """(scheme, netloc, path) of an http(s) URL; OAuthRefused for anything else."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise OAuthRefused("an OAuth metadata URL is not a valid URL", step="discovery") from exc
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment:
        raise OAuthRefused(f"an OAuth metadata URL is not an http(s) URL: {url[:100]!r}", step="discovery")
    return parts.scheme, parts.netloc, parts.path


def _origin(url: str) -> str:
    scheme, netloc, _ = _split(url)
    return f"{scheme}://{netloc}"


def _same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    default = {"http": 80, "https": 443}
    try:
        return (pa.scheme.lower(), (pa.hostname or "").lower(), pa.port or default.get(pa.scheme)) == (
            pb.scheme.lower(),
            (pb.hostname or "").lower(),
            pb.port or default.get(pb.scheme),
        )
    except ValueError:
        return False


def resource_matches(resource: str, server_url: str) -> bool:
    """RFC 9728 §3.3 for a server we reached at ``server_url``: same origin, and the
    resource's path is the server's path or one of its parents (segment by segment)."""
    if not _same_origin(resource, server_url):
        return False
    mine = [s for s in urlsplit(server_url).path.split("/") if s]
    theirs = [s for s in urlsplit(resource).path.split("/") if s]
    return mine[: len(theirs)] == theirs and not urlsplit(resource).fragment


def _strings(doc: dict[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > _MAX_LIST or not all(isinstance(v, str) for v in value):
        raise OAuthRefused(f"{where} has a malformed {key}", step="discovery", field=key)
    return tuple(value)


def _url(egress: Egress, doc: dict[str, Any], key: str, where: str, *, required: bool) -> str | None:
    value = doc.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or len(value) > 2048:
        raise OAuthRefused(f"{where} has no valid {key}", step="discovery", field=key)
    _split(value)
    try:
        egress.check_url(value, field=key)
    except UpstreamError as exc:
        raise OAuthRefused(
            f"{where} names a {key} the egress guard refuses: {exc.public_message}",
            step="discovery",
            field=key,
            cause=exc.reason,
        ) from exc
    return value


def resource_metadata_urls(server_url: str, hinted: str | None) -> list[str]:
    if hinted:
        return [hinted]
    scheme, netloc, path = _split(server_url)
    root = f"{scheme}://{netloc}/.well-known/oauth-protected-resource"
    path = path.rstrip("/")
    return [root + path, root] if path else [root]


async def resource_metadata(egress: Egress, server_url: str, hinted: str | None) -> ResourceMetadata | None:
    """The server's protected-resource metadata; None when it publishes none (2025-03-26)."""
    for url in resource_metadata_urls(server_url, hinted):
        _url(egress, {"u": url}, "u", "the protected-resource metadata URL", required=True)
        doc = await get_json(egress, url, "protected-resource metadata")
        if doc is None:
            continue
        where = f"the protected-resource metadata of {host_of(url)}"
        resource = doc.get("resource")
        if not isinstance(resource, str) or not resource:
            raise OAuthRefused(f"{where} names no resource", step="discovery")
        if not resource_matches(resource, server_url):
            raise OAuthRefused(
                f"{where} is for another resource ({resource[:100]}), not {server_url[:100]}; "
                "refusing to authorize for it",
                step="discovery",
                field="resource",
            )
        servers = _strings(doc, "authorization_servers", where) or ()
        if not servers:
            raise OAuthRefused(f"{where} names no authorization server", step="discovery")
        for server in servers[:1]:
            _url(egress, {"authorization_servers": server}, "authorization_servers", where, required=True)
        return ResourceMetadata(resource, servers, _strings(doc, "scopes_supported", where), url)
    if hinted:
        raise OAuthRefused(
            f"the protected-resource metadata at {host_of(hinted)} named by the challenge is missing",
            step="discovery",
        )
    return None


def server_metadata_urls(issuer: str) -> list[str]:
    """The MCP specification's order (2025-11-25 and 2026-07-28 authorization-server discovery)."""
    scheme, netloc, path = _split(issuer)
    base = f"{scheme}://{netloc}"
    path = path.rstrip("/")
    if not path:
        return [f"{base}/.well-known/oauth-authorization-server", f"{base}/.well-known/openid-configuration"]
    return [
        f"{base}/.well-known/oauth-authorization-server{path}",
        f"{base}/.well-known/openid-configuration{path}",
        f"{base}{path}/.well-known/openid-configuration",
    ]


def _server(egress: Egress, doc: dict[str, Any], issuer: str, where: str) -> ServerMetadata:
    said = doc.get("issuer")
    if said != issuer:  # RFC 8414 §3.3: identical, no normalisation
        shown = said[:100] if isinstance(said, str) else repr(type(said).__name__)
        raise OAuthRefused(
            f"{where} says its issuer is {shown!r}, not {issuer[:100]!r} (RFC 8414 §3.3); "
            "its endpoints are not used",
            step="discovery",
            field="issuer",
        )
    kinds = _strings(doc, "response_types_supported", where)
    if kinds is not None and "code" not in kinds:
        raise OAuthRefused(f"{where} does not offer the authorization code flow", step="discovery")
    pkce = _strings(doc, "code_challenge_methods_supported", where)
    if pkce is None or "S256" not in pkce:
        raise OAuthRefused(
            f"{where} does not advertise PKCE with S256 (code_challenge_methods_supported); "
            "the MCP specification requires refusing it",
            step="discovery",
        )
    methods = _strings(doc, "token_endpoint_auth_methods_supported", where)
    grants = _strings(doc, "grant_types_supported", where)
    return ServerMetadata(
        issuer=issuer,
        authorization_endpoint=_url(egress, doc, "authorization_endpoint", where, required=True) or "",
        token_endpoint=_url(egress, doc, "token_endpoint", where, required=True) or "",
        registration_endpoint=_url(egress, doc, "registration_endpoint", where, required=False),
        scopes_supported=_strings(doc, "scopes_supported", where),
        token_endpoint_auth_methods=methods if methods is not None else ("client_secret_basic",),
        grant_types=grants if grants is not None else ("authorization_code", "implicit"),
        cimd_supported=doc.get("client_id_metadata_document_supported") is True,
        iss_parameter_supported=doc.get("authorization_response_iss_parameter_supported") is True,
        revocation_endpoint=_url(egress, doc, "revocation_endpoint", where, required=False),
        dpop_algs=_strings(doc, "dpop_signing_alg_values_supported", where) or (),
    )


async def server_metadata(egress: Egress, issuer: str) -> ServerMetadata:
    """The authorization server's metadata, issuer checked; OAuthRefused when there is none."""
    for url in server_metadata_urls(issuer):
        doc = await get_json(egress, url, "authorization server metadata")
        if doc is not None:
            return _server(egress, doc, issuer, f"the authorization server metadata at {host_of(url)}")
    raise OAuthRefused(
        f"the authorization server {host_of(issuer)} publishes no metadata "
        "(RFC 8414 or OpenID Connect discovery)",
        step="discovery",
    )


async def legacy_server(egress: Egress, server_url: str) -> ServerMetadata:
    """2025-03-26: metadata at the MCP server's origin, else the default endpoints there."""
    origin = _origin(server_url)
    doc = await get_json(
        egress, f"{origin}/.well-known/oauth-authorization-server", "authorization server metadata"
    )
    if doc is not None:
        return _server(egress, doc, origin, f"the authorization server metadata at {host_of(origin)}")
    return ServerMetadata(
        issuer=None,
        authorization_endpoint=f"{origin}/authorize",
        token_endpoint=f"{origin}/token",
        registration_endpoint=f"{origin}/register",
        token_endpoint_auth_methods=_AUTH_METHODS,
        grant_types=("authorization_code", "refresh_token"),
    )
