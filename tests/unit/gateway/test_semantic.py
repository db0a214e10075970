"""Which embedding provider the default picks (the bundled model where it is installed, else
none), and the remembered query vectors."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import numpy as np
import pytest

from appliance import config
from appliance.gateway import semantic
from appliance.search.asks import asks_of
from appliance.search.embedders import MODEL_DIR, LocalEmbedder, local_model_available


def settings(**env: str) -> config.Settings:
    return config.load(env={"TOOLSPOKE_DATA_DIR": "/nonexistent/toolspoke", **env})


def test_the_default_is_auto_and_picks_the_bundled_model_where_its_files_are(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert settings().embeddings == "auto"
    assert local_model_available(), "the bundled model is installed in this checkout (make model)"
    caplog.set_level(logging.INFO, logger=semantic.__name__)
    # The choice is announced once per process; an earlier test in this worker may have built one.
    semantic._announce_auto.cache_clear()
    provider = semantic.build_provider(settings())
    assert isinstance(provider, LocalEmbedder) and semantic.provider_kind(settings()) == "local"
    assert "the bundled local model" in caplog.text
    caplog.clear()
    assert semantic.build_provider(settings(), tmp_path) is None  # no model files there
    assert semantic.provider_kind(settings(), tmp_path) == "none"
    assert f"not installed in {tmp_path}; search is lexical" in caplog.text


def test_an_explicit_provider_is_taken_as_said() -> None:
    assert semantic.build_provider(settings(TOOLSPOKE_EMBEDDINGS="none")) is None
    assert semantic.provider_kind(settings(TOOLSPOKE_EMBEDDINGS="none")) == "none"
    local = semantic.build_provider(settings(TOOLSPOKE_EMBEDDINGS="local"), MODEL_DIR)
    assert isinstance(local, LocalEmbedder)
    assert semantic.provider_kind(settings(TOOLSPOKE_EMBEDDINGS="openai"), Path("/nowhere")) == "openai"


def test_a_request_and_its_asks_are_embedded_in_one_run_and_remembered_for_either_caller() -> None:
    request = "Find cheap flights from Berlin to Paris. Then check the weather forecast there."
    asks = asks_of(request)
    sem = semantic.Semantic(settings(TOOLSPOKE_EMBEDDINGS="local"))

    async def run() -> tuple[object, ...]:
        try:
            vector, pooled = await sem.query_vectors(request, asks)
            alone = await sem.query_vector(request)  # Lore's search: the remembered vector
            again, pooled_again = await sem.query_vectors(request, asks)  # its asks still there
            return vector, pooled, alone, again, pooled_again
        finally:
            provider = sem.provider
            assert provider is not None
            await provider.aclose()

    vector, pooled, alone, again, pooled_again = asyncio.run(run())
    assert isinstance(vector, np.ndarray) and alone is vector and again is vector
    assert isinstance(pooled, list) and len(pooled) == 2 and all(isinstance(v, np.ndarray) for v in pooled)
    assert isinstance(pooled_again, list) and all(a is b for a, b in zip(pooled, pooled_again, strict=True))
    assert sem.counts["query_cache_hits"] == 2
