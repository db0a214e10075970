"""Header checks every MCP request passes: Host (DNS rebinding), Origin, credentials.

A browser page on evil.example can make a victim's browser POST to 127.0.0.1; the Origin
check (403) stops that, and the Host check (421) stops DNS-rebinding, where the page's
own name resolves to 127.0.0.1 and the browser sends ``Host: evil.example``. Each reads one
value: a request carrying either header twice never gets here (``refusals.py``).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from sanic import Request

from appliance.config import Settings
from appliance.errors import Forbidden, MisdirectedRequest, Unauthorized
from appliance.gateway import auth
from appliance.gateway.runtime import Runtime
from appliance.models import Principal

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")


def _host_name(host: str) -> str:
    """The name in ``name[:port]``; a value of any other shape is returned whole, so that it
    matches no allowed name (``[::1]evil`` is not ``[::1]``)."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        if end == -1:
            return host
        name, rest = host[: end + 1], host[end + 1 :]
    elif host.count(":") == 1:
        name, _, port = host.partition(":")
        rest = ":" + port
    else:
        return host
    if rest and not (rest[1:].isascii() and rest[1:].isdigit() and rest.startswith(":")):
        return host
    return name


def check_host(request: Request, settings: Settings) -> None:
    host = request.headers.get("host", "")
    name = _host_name(host)
    allowed = {*LOOPBACK_NAMES, *(h.lower() for h in settings.allowed_hosts)}
    if settings.host not in ("0.0.0.0", "::", "127.0.0.1", "::1", "localhost"):
        allowed.add(settings.host.lower())
    if name not in allowed and host.lower() not in allowed:
        raise MisdirectedRequest(f"Host {name!r} is not served here; add it to TOOLSPOKE_ALLOWED_HOSTS")


def check_origin(request: Request, settings: Settings) -> None:
    origin = request.headers.get("origin")
    if origin is None:
        return  # non-browser clients send none
    if origin in settings.allowed_origins:
        return
    refused = Forbidden(
        f"Origin {origin!r} is not allowed; add it to TOOLSPOKE_ALLOWED_ORIGINS", field="origin"
    )
    try:
        parts = urlsplit(origin)
        hostname = parts.hostname or ""
    except ValueError:  # "http://[::1" and the like: no URL, so no origin we serve
        raise refused from None
    if parts.scheme in ("http", "https") and hostname in ("localhost", "127.0.0.1", "::1"):
        return
    raise refused


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


async def authenticate(request: Request, rt: Runtime) -> Principal:
    token = bearer_token(request)
    if token is None:
        raise Unauthorized("an API key is required: send 'Authorization: Bearer <key>'")
    return await auth.authenticate(rt, token)


async def require_admin(request: Request, rt: Runtime) -> Principal:
    principal = await authenticate(request, rt)
    if not principal.is_admin:
        raise Forbidden("this endpoint needs an admin key")
    return principal
