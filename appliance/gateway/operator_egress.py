"""An endpoint the operator configured for the appliance's own use, reached on the egress path.

The embeddings endpoint (``gateway/semantic_egress.py``) and the chat endpoint that names
inferred tools (``gateway/naming_model.py``) are both the operator's own configuration
(Ollama on localhost, a model server on the LAN, a container named ``ollama``: the usual
air-gapped set-up), so each must work without opening anything else. ``OperatorEgress``
sends through ``egress/transport.py``'s ``Egress`` like every other request the appliance
makes: the host resolved and checked per request and the connection pinned to the checked
address (no DNS rebinding), redirects refused, the decoded body capped, one total deadline.

Its policy is ``EgressPolicy.for_operator_origin``: public addresses, plus exactly the
configured origin. An IP literal is allowed at that address and port only; a name at that
port only, when every answer is public, loopback, private or shared (never link-local,
where cloud metadata answers, nor multicast or reserved). The policy is a separate object
from the tool-call ``Egress``'s, and this ``Egress`` (its own connection pool) only ever
posts under the configured base URL: the allowance cannot reach a tool call, and
``ALLOWED_TOOL_CIDRS`` does not widen this path either.

Every failure becomes the caller's error type (``error``) with a reason that names the
endpoint's host at most, never the key (it travels only in the Authorization header) nor
the URL's query.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping

from appliance.egress.guard import EgressPolicy, Resolver
from appliance.egress.transport import Egress
from appliance.errors import UpstreamError


class OperatorEgress:
    """POSTs under one configured base URL, through its own guarded ``Egress``.

    ``endpoint`` names it in reasons ("the embeddings endpoint"); ``field`` is the setting
    a refused URL is blamed on; ``error`` builds the exception raised with a reason.
    """

    def __init__(
        self,
        base_url: str,
        *,
        field: str,
        endpoint: str,
        error: Callable[[str], Exception],
        resolver: Resolver | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.endpoint = endpoint
        self._error = error
        try:
            policy = EgressPolicy.for_operator_origin(base_url, field=field, resolver=resolver)
        except UpstreamError as exc:
            raise error(exc.public_message) from None
        self._base = base_url.rstrip("/")
        self._egress = Egress(policy, verify=verify)

    async def post(
        self, url: str, headers: Mapping[str, str], body: bytes, *, timeout_s: float, max_bytes: int
    ) -> tuple[int, bytes]:
        """The status and the whole (decoded, capped) body, or the caller's error."""
        if not url.startswith(self._base + "/"):
            raise self._error(f"the request to {self.endpoint} left the configured base URL")
        try:
            answer = await self._egress.send(
                "POST", url, headers=headers, content=body, timeout_s=timeout_s, max_bytes=max_bytes
            )
        except UpstreamError as exc:
            raise self._error(reason(exc, self.endpoint, timeout_s, max_bytes)) from None
        return answer.status, answer.body

    async def aclose(self) -> None:
        await self._egress.aclose()


def reason(exc: UpstreamError, endpoint: str, timeout_s: float, max_bytes: int) -> str:
    """What went wrong, for the log and the status: egress messages name a host, never a secret."""
    if exc.reason == "upstream_timeout":
        return f"{endpoint} did not answer within {timeout_s:g} s"
    if exc.reason == "upstream_too_large":
        return f"{endpoint} answered with more than {max_bytes} bytes (not read further)"
    if exc.reason == "upstream_redirect":
        return f"{endpoint} answered HTTP {exc.data.get('status')}, a redirect; redirects are not followed"
    if exc.reason == "ssrf_blocked":
        return f"the egress guard refused {endpoint}: {exc.public_message}"
    if exc.reason in ("upstream_unavailable", "upstream_tls"):
        return f"{endpoint} is unreachable ({exc.public_message})"
    return f"{endpoint} failed: {exc.public_message}"
