"""The semantic pass as the running appliance holds it: provider, circuit breaker, counters.

One ``Semantic`` per ``Runtime``. Searches ask it for a query vector; it answers None (search
stays lexical) when no provider is configured, the breaker is open, or the provider fails or
misses its deadline, and in the last two cases opens the breaker for
``embeddings_breaker_s`` so a dead endpoint costs one deadline, not one per search.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np

from appliance.config import Settings
from appliance.errors import ConfigError
from appliance.gateway.semantic_egress import EmbeddingsEgress
from appliance.search.asks import Ask
from appliance.search.embedders import (
    MODEL_DIR,
    Embedder,
    EmbeddingError,
    HttpEmbedder,
    LocalEmbedder,
    local_model_available,
)

log = logging.getLogger(__name__)

OPENROUTER_URL = "https://openrouter.ai/api/v1"
OPENROUTER_MODEL = "openai/text-embedding-3-small"
# A search whose best fused or lexical score is below this is "low-score" in the counters.
LOW_COSINE = 0.25
# Query vectors remembered per process (1.5 KB each at 384 dimensions).
RECENT_QUERIES = 512


def provider_kind(settings: Settings, model_dir: Path = MODEL_DIR) -> str:
    """``embeddings`` as it applies: ``auto`` is ``local`` when the bundled model's files are
    installed, else ``none``."""
    if settings.embeddings != "auto":
        return settings.embeddings
    return "local" if local_model_available(model_dir) else "none"


@functools.cache
def _announce_auto(kind: str, model_dir: Path) -> None:
    """Say once per process what ``auto`` chose: ``serve`` opens a runtime to check the data
    directory before the one it serves with, and both build their provider."""
    if kind == "none":
        log.info("embeddings = auto: the bundled model is not installed in %s; search is lexical", model_dir)
    else:
        log.info(
            "embeddings = auto: the bundled local model; search is hybrid once the catalogue is embedded"
        )


def build_provider(settings: Settings, model_dir: Path = MODEL_DIR) -> Embedder | None:
    """The configured provider, or None; a half-configured one is a ConfigError naming the setting."""
    kind = provider_kind(settings, model_dir)
    if settings.embeddings == "auto":
        _announce_auto(kind, model_dir)
    if kind == "none":
        return None
    if kind == "local":
        try:
            return LocalEmbedder(model_dir, bulk_threads=settings.embeddings_backfill_threads)
        except EmbeddingError as exc:
            raise ConfigError(f"embeddings = local: {exc.reason}", field="embeddings") from None
    url = settings.embeddings_url
    key = settings.embeddings_api_key
    model = settings.embeddings_model
    if url is None and settings.openrouter_api_key:
        url, key = OPENROUTER_URL, key or settings.openrouter_api_key
        model = model or OPENROUTER_MODEL
    if not url:
        raise ConfigError(
            "embeddings = openai needs embeddings_url (or OPENROUTER_API_KEY)", field="embeddings_url"
        )
    if not model:
        raise ConfigError("embeddings = openai needs embeddings_model", field="embeddings_model")
    try:
        # Through the egress path, opened for this configured origin only (semantic_egress.py).
        poster = EmbeddingsEgress(url)
        return HttpEmbedder(
            url,
            model,
            poster,
            api_key=key.reveal() if key else None,
            dimensions=settings.embeddings_dimensions,
        )
    except EmbeddingError as exc:
        raise ConfigError(f"embeddings_url: {exc.reason}", field="embeddings_url") from None


class Semantic:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._provider: Embedder | None = None
        self._built = False
        self._open_until = 0.0
        self.counts: Counter[str] = Counter()
        self.last_error = ""
        self._wake: asyncio.Event | None = None
        # Recent query vectors: agents repeat searches (a retry, the same use case in a new
        # session). A stream of distinct queries gains nothing from it.
        # A request's vector and its asks' (``query_vectors``), by the request's text.
        self._recent: OrderedDict[str, tuple[np.ndarray, list[np.ndarray | None]]] = OrderedDict()
        # Whether this process's last search used the semantic pass: then the next one embeds
        # its query while the lexical pass runs. False at start, so a switched-off or unembedded
        # appliance never sends a query to the provider; after the switch is turned off in
        # another process, at most one search here still embeds its query (and drops it).
        self._last_semantic = False

    def forget_queries(self) -> None:
        """Drop the remembered query vectors (the latency bench times uncached searches)."""
        self._recent.clear()

    def expect_semantic(self) -> bool:
        return self._last_semantic and not self.breaker_open()

    def note_decision(self, *, semantic: bool) -> None:
        self._last_semantic = semantic

    @property
    def provider(self) -> Embedder | None:
        if not self._built:
            self._provider = build_provider(self.settings)
            self._built = True
        return self._provider

    @property
    def model_id(self) -> str | None:
        provider = self.provider
        return None if provider is None else provider.model_id

    def breaker_open(self) -> bool:
        return time.monotonic() < self._open_until

    async def query_vector(self, text: str) -> np.ndarray | None:
        """The query's vector, or None (the search goes lexical); never raises."""
        vector, _ = await self.query_vectors(text, [])
        return vector

    async def query_vectors(
        self, text: str, asks: list[Ask]
    ) -> tuple[np.ndarray | None, list[np.ndarray | None]]:
        """The request's vector and each of its asks' (``search/asks.py``), or None for the
        request (the search goes lexical) and for an ask the provider could not place; never
        raises. Remembered by the request's text: its asks follow from it."""
        provider = self.provider
        none: list[np.ndarray | None] = [None] * len(asks)
        if provider is None or self.breaker_open():
            if provider is not None:
                self.counts["breaker_open"] += 1
            return None, none
        cached = self._recent.get(text)
        # A text's asks follow from it, so a remembered entry has them all; a caller that wants
        # the vector alone (Lore's search) is served by an entry that also holds asks.
        if cached is not None and (not asks or len(cached[1]) == len(asks)):
            self._recent.move_to_end(text)
            self.counts["query_cache_hits"] += 1
            return cached[0], list(cached[1]) if asks else []
        try:
            vector, pooled = await provider.embed_query(
                text, asks, timeout_s=self.settings.embeddings_timeout_s
            )
        except EmbeddingError as exc:
            self._trip(exc.reason)
            return None, none
        for row in (vector, *pooled):
            if row is not None:
                row.flags.writeable = False  # shared by every search that repeats this query
        if asks or cached is None:  # never forget an entry's asks for a caller that wanted none
            self._recent[text] = (vector, pooled)
        if len(self._recent) > RECENT_QUERIES:
            self._recent.popitem(last=False)
        return vector, pooled

    def _trip(self, reason: str) -> None:
        self.counts["provider_errors"] += 1
        self.last_error = reason
        self._open_until = time.monotonic() + self.settings.embeddings_breaker_s
        log.warning(
            "embedding provider failed (%s); searches are lexical for %g s",
            reason,
            self.settings.embeddings_breaker_s,
        )

    def note_outcome(self, query: str, count: int, best: float | None, ranking: str) -> None:
        """Count (and log) searches that found nothing or found only weak matches."""
        self.counts[f"ranking_{ranking}"] += 1
        weak = ranking != "lexical" and best is not None and best < LOW_COSINE
        if count and not weak:
            return
        what = "zero_results" if not count else "low_score"
        self.counts[what] += 1
        if self.settings.search_log_queries:
            log.info("search with %s: %r", what.replace("_", " "), query[:200])
        else:
            log.info("search with %s (query text not logged; see search_log_queries)", what.replace("_", " "))

    # The backfill task sleeps on this; imports and re-syncs in this process set it.
    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def wake_event(self) -> asyncio.Event:
        if self._wake is None:
            self._wake = asyncio.Event()
        return self._wake

    async def aclose(self) -> None:
        if self._provider is not None:
            await self._provider.aclose()
