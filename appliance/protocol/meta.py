"""The ``_meta`` keys the gateway reads and writes, on requests and results.

The ``io.modelcontextprotocol/`` prefix is reserved to the specification (2026-07-28 puts the
request envelope there); ``toolspoke/`` is ours, on tool results and the idempotency key.
"""

from __future__ import annotations

from typing import Any

PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
LOG_LEVEL_KEY = "io.modelcontextprotocol/logLevel"
PROGRESS_TOKEN_KEY = "progressToken"
OURS = "toolspoke/"
IDEMPOTENCY_KEY = OURS + "idempotencyKey"
APPROVAL_KEY = OURS + "approval"  # a retry names the approval that covers it (issue 20)


def of(params: Any) -> dict[str, Any]:
    """``params._meta`` when it is an object, else an empty one."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta if isinstance(meta, dict) else {}


def progress_token(params: Any) -> str | int | None:
    """The client's ``params._meta.progressToken`` (None: it asked for no progress, or sent a
    token that is neither a string nor an integer)."""
    token = of(params).get(PROGRESS_TOKEN_KEY)
    if isinstance(token, str) or (isinstance(token, int) and not isinstance(token, bool)):
        return token
    return None
