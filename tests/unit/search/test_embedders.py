"""Embedding providers: the bundled local model, and an OpenAI-compatible endpoint served for
real on loopback (tests/support/embeddings_server.py) through the egress path
(gateway/semantic_egress.py), including every way it can fail. The egress guarantees
themselves (cap, redirects, pinning, the origin allowance) are in test_embeddings_egress.py."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from appliance.gateway.semantic_egress import EmbeddingsEgress
from appliance.search.asks import asks_of
from appliance.search.embedders import EmbeddingError, HttpEmbedder, LocalEmbedder
from tests.support.embeddings_server import DIM, EmbeddingsServer


def _embed(server: EmbeddingsServer, texts: list[str], timeout_s: float = 5.0, **kw: object) -> np.ndarray:
    async def main() -> np.ndarray:
        url = server.base_url
        emb = HttpEmbedder(url, "test-model", EmbeddingsEgress(url), api_key="sk-test-secret", **kw)  # type: ignore[arg-type]
        try:
            return await emb.embed(texts, timeout_s=timeout_s)
        finally:
            await emb.aclose()

    return asyncio.run(main())


def test_an_openai_compatible_endpoint_returns_normalised_vectors_in_order() -> None:
    with EmbeddingsServer() as server:
        rows = _embed(server, ["list pets", "weather in paris", "list pets"])
        assert rows.shape == (3, DIM) and rows.dtype == np.float32
        assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
        assert np.allclose(rows[0], rows[2]) and not np.allclose(rows[0], rows[1])
        assert server.auth == ["Bearer sk-test-secret"]


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("error", "HTTP 500"),
        ("malformed", "malformed body"),
        ("wrong_count", "returned 1 vectors for 2 texts"),
        ("nan", "non-finite"),
    ],
)
def test_a_failing_endpoint_is_an_embedding_error_that_names_the_failure(mode: str, says: str) -> None:
    with EmbeddingsServer(mode=mode) as server, pytest.raises(EmbeddingError) as info:
        _embed(server, ["a", "b"])
    assert says in info.value.reason
    assert "sk-test-secret" not in info.value.reason


def test_vectors_of_the_wrong_dimension_are_refused() -> None:
    with EmbeddingsServer(mode="wrong_dim") as server, pytest.raises(EmbeddingError, match="16 dimensions"):
        _embed(server, ["a"], dimensions=DIM)


def test_a_slow_endpoint_fails_at_the_deadline_not_later() -> None:
    with EmbeddingsServer(mode="slow", delay_s=10) as server:
        started = time.monotonic()
        with pytest.raises(EmbeddingError, match=r"did not answer within 0\.3 s"):
            _embed(server, ["a"], timeout_s=0.3)
        assert time.monotonic() - started < 2.0


def test_an_unreachable_endpoint_is_an_embedding_error() -> None:
    with EmbeddingsServer() as server:
        url = server.base_url
    emb_error = None
    try:

        async def main() -> None:
            emb = HttpEmbedder(url, "m", EmbeddingsEgress(url))
            try:
                await emb.embed(["a"], timeout_s=2)
            finally:
                await emb.aclose()

        asyncio.run(main())
    except EmbeddingError as exc:
        emb_error = exc
    assert emb_error is not None and "unreachable" in emb_error.reason


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(EmbeddingError, match="scheme 'file' is not allowed"):
        EmbeddingsEgress("file:///etc/passwd")

    async def build() -> None:
        egress = EmbeddingsEgress("http://127.0.0.1:9/v1")
        try:
            with pytest.raises(EmbeddingError, match="http:// or https://"):
                HttpEmbedder("file:///etc/passwd", "m", egress)
        finally:
            await egress.aclose()

    asyncio.run(build())


def test_the_local_model_puts_a_paraphrase_closer_than_an_unrelated_sentence() -> None:
    emb = LocalEmbedder()
    rows = emb.embed_sync(
        [
            "make a slide deck about Q3",
            "create a PowerPoint presentation",
            "delete a row from a database table",
        ]
    )
    assert rows.shape == (3, 384)
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-4)
    assert float(rows[0] @ rows[1]) > float(rows[0] @ rows[2]) + 0.1
    # Batching and padding do not change a text's vector.
    alone = emb.embed_sync(["create a PowerPoint presentation"])[0]
    assert float(alone @ rows[1]) > 0.999
    assert emb.model_id.startswith("local/all-MiniLM-L6-v2-int8@")


def test_a_batch_shared_among_threads_gives_each_text_the_vector_it_has_alone() -> None:
    texts = [
        f"tool {i}: {verb} the {noun}"
        for i, (verb, noun) in enumerate(
            [
                ("list", "invoices"),
                ("create", "a slide"),
                ("delete", "a row"),
                ("send", "an email"),
                ("get", "weather"),
            ]
        )
    ]
    emb = LocalEmbedder(bulk_threads=2)

    async def run() -> tuple[np.ndarray, np.ndarray]:
        try:
            shared = await emb.embed(texts, timeout_s=30)
            query = await emb.embed([texts[3]], timeout_s=30)
            return shared, query
        finally:
            await emb.aclose()

    shared, query = asyncio.run(run())
    alone = np.stack([emb.embed_sync([t])[0] for t in texts])
    assert np.array_equal(shared, alone)  # bit for bit, in the order given
    assert np.array_equal(query[0], alone[3])


def test_the_local_model_pools_each_ask_from_the_request_s_own_run() -> None:
    emb = LocalEmbedder()
    query = "Find me cheap flights from Berlin to Paris. Then check the weather forecast for Paris."
    asks = asks_of(query)
    assert len(asks) == 2
    vector, pooled = emb.embed_query_sync(query, asks)
    # the request's vector is exactly the one embedding it alone gives
    assert np.array_equal(vector, emb.embed_sync([query])[0])
    flights, weather = (v for v in pooled if v is not None)
    assert np.allclose([np.linalg.norm(flights), np.linalg.norm(weather)], 1.0, atol=1e-4)
    # each pooled vector leans to its own ask: closer to it embedded alone than to the other
    alone = emb.embed_sync([a.text for a in asks])
    assert float(flights @ alone[0]) > float(flights @ alone[1]) + 0.1
    assert float(weather @ alone[1]) > float(weather @ alone[0]) + 0.1
    # an ask past the model's cut (128 word pieces) has no pieces to pool: None
    long_query = "word " * 200 + ". Book a table for two tonight."
    late = asks_of(long_query)
    _, pooled_late = emb.embed_query_sync(long_query, late)
    assert pooled_late[-1] is None and pooled_late[0] is not None
