"""The 2026-07-28 (stateless) revision: the envelope checks of one modern request.

Which requests are modern is decided in ``rpc/session.py`` (``protocol/versions.is_modern``
holds the rule). A modern request stands alone: its version, client info and capabilities
come with it, and who is calling comes from its credential, never from a protocol session.

On HTTP the routing headers (``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``) must
match the body, so that a load balancer routing on headers and this server executing the
body can never disagree (streamable-http.mdx "Server Validation").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from appliance.errors import HeaderMismatch, InvalidParams, UnsupportedProtocolVersion
from appliance.protocol import param_headers, versions
from appliance.protocol.log_levels import LOG_LEVELS
from appliance.protocol.meta import (
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    LOG_LEVEL_KEY,
    PROTOCOL_VERSION_KEY,
)
from appliance.protocol.routing import NAME_BEARING, ROUTING_HEADERS
from appliance.rpc.jsonrpc import Message


@dataclass(frozen=True)
class Envelope:
    protocol_version: str
    client_info: dict[str, Any]
    client_capabilities: dict[str, Any]
    log_level: str | None = None  # the request's opt-in to notifications/message (None: none)


def decode_header(value: str | None) -> str | None:
    """A header value with the spec's ``=?base64?…?=`` sentinel decoded (None if malformed)."""
    return None if value is None else param_headers.decode(value)


def check_envelope(msg: Message, headers: Mapping[str, list[str]] | None) -> Envelope:
    """The request's envelope, or the first rule it breaks (checked in the spec's order).

    ``headers``: lower-case header names to every value received (``None`` off HTTP).
    """
    meta = msg.meta
    missing = [k for k in (PROTOCOL_VERSION_KEY, CLIENT_CAPABILITIES_KEY) if k not in meta]
    if "_meta" not in msg.params or missing:
        raise InvalidParams(
            f"params._meta must carry {PROTOCOL_VERSION_KEY!r} and {CLIENT_CAPABILITIES_KEY!r}",
            field="_meta",
        )
    version = meta[PROTOCOL_VERSION_KEY]
    if headers is not None:
        for name in ROUTING_HEADERS:
            if len(headers.get(name, [])) > 1:
                raise HeaderMismatch(f"the {name} header appears more than once", field=name)
        if _one(headers, "mcp-protocol-version") != version:
            raise HeaderMismatch(
                "MCP-Protocol-Version header does not match params._meta's protocol version",
                field="mcp-protocol-version",
            )
        if _one(headers, "mcp-method") != msg.method:
            raise HeaderMismatch("Mcp-Method header does not match the request's method", field="mcp-method")
        key = NAME_BEARING.get(msg.method or "")
        body_value = msg.params.get(key) if key else None
        if body_value is not None and decode_header(_one(headers, "mcp-name")) != body_value:
            raise HeaderMismatch(f"Mcp-Name header does not match params.{key}", field="mcp-name")
    if not isinstance(version, str):
        raise InvalidParams("the protocol version in params._meta must be a string", field="_meta")
    if version not in versions.MODERN_VERSIONS:
        raise UnsupportedProtocolVersion(
            "Unsupported protocol version",
            field="_meta",
            data={"supported": list(versions.ALL_VERSIONS), "requested": version},
        )
    info = meta.get(CLIENT_INFO_KEY)
    capabilities = meta.get(CLIENT_CAPABILITIES_KEY)
    level = meta.get(LOG_LEVEL_KEY)
    if level is not None and level not in LOG_LEVELS:
        raise InvalidParams(
            f"{LOG_LEVEL_KEY!r} in params._meta must be one of {', '.join(LOG_LEVELS)}", field="_meta"
        )
    return Envelope(
        version,
        info if isinstance(info, dict) else {},
        capabilities if isinstance(capabilities, dict) else {},
        level,
    )


def _one(headers: Mapping[str, list[str]], name: str) -> str | None:
    values = headers.get(name) or []
    # RFC 9110 5.5: a field value excludes the optional whitespace around it.
    return values[0].strip(" \t") if values else None
