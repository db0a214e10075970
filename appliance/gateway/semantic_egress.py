"""The embeddings endpoint's way out: the egress path, opened for the operator's origin only.

``HttpEmbedder`` (``search/embedders.py``) holds no transport code; it is handed an
``EmbeddingsEgress``, whose ``post`` sends through ``egress/transport.py``'s ``Egress`` like
every other request the appliance makes: the host resolved and checked per request and the
connection pinned to the checked address (no DNS rebinding), redirects refused, the decoded
body capped, one total deadline.

Which addresses: the embeddings URL is the operator's own configuration (Ollama on
localhost, TEI on the LAN, a container named ``ollama``: the usual air-gapped set-up), so it
must work without opening anything else. It gets a policy of its own,
``EgressPolicy.for_operator_origin``: public addresses, plus exactly the configured origin.
An IP literal is allowed at that address and port only; a name at that port only, when every
answer is public, loopback, private or shared (never link-local, where cloud metadata
answers, nor multicast or reserved). The policy is a separate object from the tool-call
``Egress``'s, and this ``Egress`` (its own connection pool) only ever posts under the
configured base URL: the allowance cannot reach a tool call, and ``ALLOWED_TOOL_CIDRS``
does not widen the embeddings path either.

Every failure becomes an ``EmbeddingError`` whose reason names the endpoint's host at most,
never the key (it travels only in the Authorization header) nor the URL's query.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping

from appliance.egress.guard import EgressPolicy, Resolver
from appliance.egress.transport import Egress
from appliance.errors import UpstreamError
from appliance.search.embedders import EmbeddingError

ENDPOINT = "the embeddings endpoint"


class EmbeddingsEgress:
    """POSTs under one configured base URL, through its own guarded ``Egress``."""

    def __init__(
        self, base_url: str, *, resolver: Resolver | None = None, verify: ssl.SSLContext | bool = True
    ) -> None:
        try:
            policy = EgressPolicy.for_operator_origin(base_url, field="embeddings_url", resolver=resolver)
        except UpstreamError as exc:
            raise EmbeddingError(exc.public_message) from None
        self._base = base_url.rstrip("/")
        self._egress = Egress(policy, verify=verify)

    async def post(
        self, url: str, headers: Mapping[str, str], body: bytes, *, timeout_s: float, max_bytes: int
    ) -> tuple[int, bytes]:
        """The status and the whole (decoded, capped) body, or EmbeddingError."""
        if not url.startswith(self._base + "/"):
            raise EmbeddingError("the embeddings request left the configured base URL")
        try:
            answer = await self._egress.send(
                "POST", url, headers=headers, content=body, timeout_s=timeout_s, max_bytes=max_bytes
            )
        except UpstreamError as exc:
            raise EmbeddingError(_reason(exc, timeout_s, max_bytes)) from None
        return answer.status, answer.body

    async def aclose(self) -> None:
        await self._egress.aclose()


def _reason(exc: UpstreamError, timeout_s: float, max_bytes: int) -> str:
    """What went wrong, for the log and the status: egress messages name a host, never a secret."""
    if exc.reason == "upstream_timeout":
        return f"{ENDPOINT} did not answer within {timeout_s:g} s"
    if exc.reason == "upstream_too_large":
        return f"{ENDPOINT} answered with more than {max_bytes} bytes (not read further)"
    if exc.reason == "upstream_redirect":
        return f"{ENDPOINT} answered HTTP {exc.data.get('status')}, a redirect; redirects are not followed"
    if exc.reason == "ssrf_blocked":
        return f"the egress guard refused {ENDPOINT}: {exc.public_message}"
    if exc.reason in ("upstream_unavailable", "upstream_tls"):
        return f"{ENDPOINT} is unreachable ({exc.public_message})"
    return f"{ENDPOINT} failed: {exc.public_message}"
