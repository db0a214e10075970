"""MCP revisions: which ones are spoken, the 2026-07-28 / 2025-era split, and negotiation.

Two eras share every endpoint. The 2026-07-28 revision is stateless: every request carries
its version in ``_meta`` (and, on HTTP, in ``MCP-Protocol-Version``). The 2025-era revisions
(2024-11-05 for clients still on the HTTP+SSE transport) start with the ``initialize``
handshake, which negotiates one version for the rest of the session.
"""

from __future__ import annotations

from typing import Any

MODERN_VERSION = "2026-07-28"
MODERN_VERSIONS = (MODERN_VERSION,)
# Newest first: a server that does not speak the version a client asks for offers its newest.
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST_LEGACY = LEGACY_VERSIONS[0]
ALL_VERSIONS = (*MODERN_VERSIONS, *LEGACY_VERSIONS)
# Before 2025-11-25, a tool's input-validation failure was a protocol error (with the path);
# since then it is a tool result, so that the model can correct itself.
_VALIDATION_AS_PROTOCOL_ERROR = frozenset({"2024-11-05", "2025-03-26", "2025-06-18"})


def negotiate(requested: Any) -> str:
    """The legacy version an ``initialize`` asking for ``requested`` gets (a string, checked
    by the caller): that one when spoken here, else the newest."""
    return requested if requested in LEGACY_VERSIONS else LATEST_LEGACY


def header_names_modern(version_header: str | None) -> bool:
    """Whether an ``MCP-Protocol-Version`` value names a revision of the stateless era
    (a version we do not know but which sorts after the 2025 era counts too: the request
    then gets the modern era's "unsupported version" answer, not a session error)."""
    return version_header is not None and version_header not in LEGACY_VERSIONS and version_header >= "2026"


def is_modern(meta_version: bool, method: str | None, version_header: str | None) -> bool:
    """The era of one request: ``meta_version`` says whether its ``params._meta`` carries the
    protocol version key. An ``initialize`` without it starts a legacy session; with it, it
    is a modern request for a method 2026-07-28 removed (answered 404 -32601)."""
    if meta_version:
        return True  # the key's prefix is reserved: a legacy request never carries it
    if method == "initialize":
        return False
    return header_names_modern(version_header)


def validation_is_protocol_error(version: str) -> bool:
    """Whether a tool call's invalid arguments are a JSON-RPC error in ``version`` (else an
    ``isError`` result)."""
    return version in _VALIDATION_AS_PROTOCOL_ERROR
