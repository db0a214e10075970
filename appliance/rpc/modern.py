"""The 2026-07-28 (stateless) revision: which requests use it, and their envelope checks.

A request is *modern* when it carries the per-request ``_meta`` protocol version, or says
so in ``MCP-Protocol-Version``; an ``initialize`` without that ``_meta`` key starts a legacy
session (with it, it is a modern request for a removed method). A modern
request stands alone: its version, client info and capabilities come with it, and who is
calling comes from its credential, never from a protocol session.

On HTTP the routing headers (``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``) must
match the body, so that a load balancer routing on headers and this server executing the
body can never disagree (streamable-http.mdx "Server Validation").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from appliance.errors import HeaderMismatch, InvalidParams, UnsupportedProtocolVersion
from appliance.rpc.jsonrpc import Message
from appliance.upstream import param_headers
from appliance.upstream.mcp_session import LOG_LEVEL_KEY, LOG_LEVELS

MODERN_VERSION = "2026-07-28"
MODERN_VERSIONS = (MODERN_VERSION,)
PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
ROUTING_HEADERS = ("mcp-protocol-version", "mcp-method", "mcp-name")
# Methods whose target is mirrored into Mcp-Name, and the body field it mirrors.
NAME_BEARING = {"tools/call": "name", "resources/read": "uri", "prompts/get": "name"}


@dataclass(frozen=True)
class Envelope:
    protocol_version: str
    client_info: dict[str, Any]
    client_capabilities: dict[str, Any]
    log_level: str | None = None  # the request's opt-in to notifications/message (None: none)


def is_modern(msg: Message, version_header: str | None, legacy_versions: tuple[str, ...]) -> bool:
    if PROTOCOL_VERSION_KEY in msg.meta:
        # The key's prefix is reserved: a legacy initialize never carries it, so an
        # initialize that does is a modern request for a removed method (404 -32601).
        return True
    if msg.method == "initialize":
        return False
    return version_header is not None and version_header not in legacy_versions and version_header >= "2026"


def decode_header(value: str | None) -> str | None:
    """A header value with the spec's ``=?base64?…?=`` sentinel decoded (None if malformed)."""
    return None if value is None else param_headers.decode(value)


def check_envelope(
    msg: Message, headers: Mapping[str, list[str]] | None, supported: tuple[str, ...] = MODERN_VERSIONS
) -> Envelope:
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
    if version not in MODERN_VERSIONS:
        raise UnsupportedProtocolVersion(
            "Unsupported protocol version",
            field="_meta",
            data={"supported": list(supported), "requested": version},
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
