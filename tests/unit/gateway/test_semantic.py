"""Which embedding provider the default picks: the bundled model where it is installed, else none."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from appliance import config
from appliance.gateway import semantic
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
