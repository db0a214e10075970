"""The ApplianceError tree: every failure the appliance reports on purpose.

::

    ApplianceError                      500  -32603  internal (never carries details to clients)
    ├── ConfigError                     (start-up only; CLI exit 2)
    ├── StorageError                    503  -32003  storage_unavailable
    ├── InvalidRequest                  400  -32600  invalid_request
    │   ├── ParseError                  400  -32700  parse_error
    │   ├── HeaderMismatch              400  -32020  header_mismatch  (2026-07-28 routing headers)
    │   ├── MissingClientCapability     400  -32021  missing_client_capability (2026-07-28)
    │   └── UnsupportedProtocolVersion  400  -32022  unsupported_protocol_version
    ├── MethodNotFound                  404  -32601  method_not_found
    ├── InvalidParams                   422  -32602  invalid_params   (names the member in ``field``)
    │   ├── ToolNotFound                404  -32602  tool_not_found   (same text for unseen and absent)
    │   ├── ArgumentsInvalid            422  -32602  arguments_invalid (JSON pointer in ``field``)
    │   └── WrongRunner                 422  -32602  wrong_runner
    ├── NotFound                        404  -32602  not_found        (toolkits, projects)
    ├── Conflict                        409  -32602  conflict
    ├── ImportFailed                    422  -32602  import_failed    (bad spec; nothing stored)
    ├── QuotaExhausted                  429  -32002  quota_exhausted  (window, limit, used, resets_at)
    ├── IdempotencyConflict             409  -32004  idempotency_key_reused / idempotency_in_progress
    ├── Unauthorized                    401  -32001  unauthorized
    │   └── KeyExpired                  401  -32001  key_expired      (the right key, past its expiry)
    ├── Forbidden                       403  -32001  forbidden
    │   ├── MisdirectedRequest          421  -32005  misdirected_host (a Host not served here)
    │   ├── CallRefused                 403  -32006  read_only / policy_denied (call policy)
    │   │   └── ApprovalRefused         403  -32006  approval_<why>: a retry its approval does not cover
    │   ├── ApprovalRequired            403  -32007  approval_required (a pending approval's id, its
    │   │                                             queue's URL, how to retry); an isError result on
    │   │                                             tools/call (rpc/mcp.py)
    │   └── ConnectionRequired          403  -32008  connection_required (toolkit, project, connect_url)
    │       └── UrlElicitationRequired  403  -32042  connection_required, and ``data.elicitations``: the
    │                                                 connect URL as a URL-mode elicitation (2025-11-25
    │                                                 clients that declared ``elicitation.url``)
    ├── RateLimited                     429  -32001  rate_limited     (``data.retry_after_s``)
    └── UpstreamError                   502  (an ``isError`` tool result, never a JSON-RPC error)
        reasons: upstream_timeout, upstream_too_large, upstream_invalid, upstream_tls,
                 upstream_unavailable, upstream_redirect, ssrf_blocked, no_upstream

Each class knows its HTTP status, JSON-RPC code and public reason; only ``web/`` turns
them into HTTP responses and only ``rpc/`` into JSON-RPC errors. ``public_message`` is
what a client may read: it never includes a traceback, a path or SQL.
"""

from __future__ import annotations

from typing import Any


class ApplianceError(Exception):
    http_status = 500
    rpc_code = -32603
    reason = "internal"

    def __init__(self, message: str, *, field: str | None = None, data: dict[str, Any] | None = None):
        super().__init__(message)
        self.public_message = message
        self.field = field
        self.data = dict(data or {})

    def payload(self) -> dict[str, Any]:
        """Machine-readable details for the wire: reason, the named field and extras."""
        out: dict[str, Any] = {"reason": self.reason}
        if self.field is not None:
            out["field"] = self.field
        out.update(self.data)
        return out


class ConfigError(ApplianceError):
    reason = "config"


class StorageError(ApplianceError):
    http_status = 503
    rpc_code = -32003
    reason = "storage_unavailable"


class InvalidRequest(ApplianceError):
    http_status = 400
    rpc_code = -32600
    reason = "invalid_request"


class ParseError(InvalidRequest):
    rpc_code = -32700
    reason = "parse_error"


class HeaderMismatch(InvalidRequest):
    """2026-07-28: a routing header is missing or disagrees with the body (HTTP 400, -32020)."""

    rpc_code = -32020
    reason = "header_mismatch"


class MissingClientCapability(InvalidRequest):
    """2026-07-28: serving the request needs a client capability the request did not declare
    (HTTP 400, -32021; ``data.requiredCapabilities`` is a ClientCapabilities object)."""

    rpc_code = -32021
    reason = "missing_client_capability"


class UnsupportedProtocolVersion(InvalidRequest):
    """2026-07-28: the request's protocol version is not served here (HTTP 400, -32022)."""

    rpc_code = -32022
    reason = "unsupported_protocol_version"


class MethodNotFound(ApplianceError):
    http_status = 404
    rpc_code = -32601
    reason = "method_not_found"


class InvalidParams(ApplianceError):
    http_status = 422
    rpc_code = -32602
    reason = "invalid_params"


class ToolNotFound(InvalidParams):
    http_status = 404
    reason = "tool_not_found"


class ArgumentsInvalid(InvalidParams):
    reason = "arguments_invalid"


class WrongRunner(InvalidParams):
    reason = "wrong_runner"


class NotFound(ApplianceError):
    http_status = 404
    rpc_code = -32602
    reason = "not_found"


class Conflict(ApplianceError):
    http_status = 409
    rpc_code = -32602
    reason = "conflict"


class ImportFailed(ApplianceError):
    http_status = 422
    rpc_code = -32602
    reason = "import_failed"


class Unauthorized(ApplianceError):
    http_status = 401
    rpc_code = -32001
    reason = "unauthorized"


class KeyExpired(Unauthorized):
    """The key is right but past its expiry. Only its holder can learn this (the secret's hash
    matched first), so saying so reveals nothing, and tells the holder what to do."""

    reason = "key_expired"


class Forbidden(ApplianceError):
    http_status = 403
    rpc_code = -32001
    reason = "forbidden"


class MisdirectedRequest(Forbidden):
    """A Host header this server does not answer to (DNS rebinding). Its own code: -32001 is
    the rate limiter's, and a client that backs off on it would retry a request that can
    never pass."""

    http_status = 421
    rpc_code = -32005
    reason = "misdirected_host"


class CallRefused(Forbidden):
    """The call policy refuses a tool the caller may see (issue 20): a read-only key, agent or
    appliance and a tool that is not a read tool (``read_only``), or a ``deny`` rule
    (``policy_denied``). Nothing was sent or charged. Its own code: retrying cannot help
    until the policy changes, so it must not read as the rate limiter's -32001."""

    rpc_code = -32006

    def __init__(self, message: str, *, reason: str, **kw: Any):
        super().__init__(message, **kw)
        self.reason = reason


class ApprovalRefused(CallRefused):
    """A retry the approval it names does not cover (issue 20): unknown to this caller, for
    other arguments or another tool, denied, used, expired, or given under an older call
    policy (``approval_unknown``, ``approval_mismatch``, ``approval_denied``, ``approval_used``,
    ``approval_expired``, ``approval_stale``). Nothing was sent or charged."""


class ApprovalRequired(Forbidden):
    """The call needs a person's yes first (an ``approve`` rule): ``data.approval`` holds the
    pending approval's id, the URL of the console's queue and how to retry. Nothing was sent
    or charged. Its own code: the client acts on it (shows the URL, retries once approved),
    which neither a refusal for good (-32006) nor the rate limiter's -32001 would invite."""

    rpc_code = -32007
    reason = "approval_required"
    # The approval it waits for (``access/approvals.Approval``), for the in-band ways of
    # asking (``gateway/approvals_inband.py``); never on the wire.
    approval: Any = None


class ConnectionRequired(Forbidden):
    """A ``per_user`` toolkit's tool, and the caller's user has no working connection to it
    (none, or one that needs reconnecting). Nothing was sent or charged. ``data`` names the
    toolkit and gives the console page where the user connects (``connect_url``). Its own
    code: only the person can fix it, by connecting; retrying cannot help."""

    rpc_code = -32008
    reason = "connection_required"


class UrlElicitationRequired(ConnectionRequired):
    """The same refusal said the way 2025-11-25 sanctions sending a person to a page
    (client/elicitation.mdx, URLElicitationRequiredError): ``data.elicitations`` holds one
    URL-mode elicitation to the connect page; ``data`` keeps ConnectionRequired's members."""

    rpc_code = -32042


class RateLimited(ApplianceError):
    http_status = 429
    rpc_code = -32001
    reason = "rate_limited"


class UpstreamError(ApplianceError):
    """The call left (or tried to leave) the gateway and the far side failed.

    Becomes an ``isError`` tool result with ``reason`` in ``_meta``; never a protocol error.
    """

    http_status = 502
    reason = "upstream_unavailable"

    def __init__(self, message: str, *, reason: str = "upstream_unavailable", sent: bool = True, **kw: Any):
        super().__init__(message, **kw)
        self.reason = reason
        # False only where it is proved that nothing reached the upstream (its name did not
        # resolve, the TCP connection was refused): the call is not charged (LEDGER-06).
        self.sent = sent


class QuotaExhausted(ApplianceError):
    """A toolkit's ceiling or the caller's credit is used up; nothing was sent or charged."""

    http_status = 429
    rpc_code = -32002
    reason = "quota_exhausted"


class IdempotencyConflict(ApplianceError):
    """An idempotency key already used for another call, or whose first call still runs; nothing ran."""

    http_status = 409
    rpc_code = -32004
    reason = "idempotency_key_reused"

    def __init__(self, message: str, *, reason: str = "idempotency_key_reused", **kw: Any):
        super().__init__(message, **kw)
        self.reason = reason
