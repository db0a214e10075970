"""The embeddings endpoint's way out: the egress path, opened for the operator's origin only.

``HttpEmbedder`` (``search/embedders.py``) holds no transport code; it is handed an
``EmbeddingsEgress``, an ``OperatorEgress`` (``gateway/operator_egress.py``): it sends
through ``egress/transport.py``'s ``Egress`` like every other request the appliance makes,
under a policy that opens exactly the configured origin (loopback and LAN included) and
nothing else, so the allowance cannot reach a tool call and ``ALLOWED_TOOL_CIDRS`` does not
widen the embeddings path either.

Every failure becomes an ``EmbeddingError`` whose reason names the endpoint's host at most,
never the key (it travels only in the Authorization header) nor the URL's query.
"""

from __future__ import annotations

import ssl

from appliance.egress.guard import Resolver
from appliance.gateway.operator_egress import OperatorEgress
from appliance.search.embedders import EmbeddingError

ENDPOINT = "the embeddings endpoint"


class EmbeddingsEgress(OperatorEgress):
    """POSTs under the configured embeddings URL, through its own guarded ``Egress``."""

    def __init__(
        self, base_url: str, *, resolver: Resolver | None = None, verify: ssl.SSLContext | bool = True
    ) -> None:
        super().__init__(
            base_url,
            field="embeddings_url",
            endpoint=ENDPOINT,
            error=EmbeddingError,
            resolver=resolver,
            verify=verify,
        )
