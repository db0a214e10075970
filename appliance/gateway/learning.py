"""Learning a query adapter on this deployment (``toolspoke learn``; search/adapter.py).

The shipped adapter was learned from public tool-retrieval requests and leaves a catalogue unlike
theirs where it was. A deployment has better examples of its own: labelled requests (the JSONL
``toolspoke eval`` reads) or its usage log's searches that led to a call. From them an adapter is
learned for the catalogue's own vectors and stored (``learned_adapters``); searches with that
model then use it instead of the shipped one, until ``forget``.

Before storing, the examples are split in two halves (by a hash of each request) and an adapter
learned on each half is scored on the other: the semantic MRR of the needed tools with and
without it is reported, so the operator sees what it does on requests it did not learn from.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any

from appliance.catalogue import store
from appliance.errors import InvalidParams, UpstreamError
from appliance.gateway.backfill import BATCH
from appliance.gateway.evaluation import USAGE_QUERIES, rows_by_key
from appliance.gateway.runtime import Runtime
from appliance.search import adapter, usage, vectors
from appliance.search.embedders import EmbeddingError

# Fewer labelled requests than this teach the adapter noise.
MIN_EXAMPLES = 20
# The newest this many are learned from: the work grows with requests x candidate tools
# (search/adapter.fit: at most CANDIDATES_MAX tools).
MAX_EXAMPLES = 1_000


async def learn_from_queries(rt: Runtime, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Learn from labelled requests (``evaluation.read_queries``'s items)."""
    return await _learn(rt, [(str(i["query"]), set(i["gold"])) for i in items], "queries")


async def learn_from_usage(rt: Runtime) -> dict[str, Any]:
    """Learn from the usage log: each logged search that led to a call, the called tool needed."""
    async with rt.db.read() as conn:
        called = await conn.batch(lambda r: usage.called_in(r, limit=USAGE_QUERIES))
    if not called:
        raise InvalidParams("the usage log holds no search that led to a call yet", field="from_usage")
    return await _learn(rt, [(query, {name}) for _, query, name in called], "usage")


async def forget(rt: Runtime) -> bool:
    """Drop this deployment's adapter for the configured model; whether there was one."""
    model_id = _model(rt)
    return await rt.db.write_batch(lambda w: adapter.forget_in(w, model_id))


def _model(rt: Runtime) -> str:
    model_id = rt.semantic.model_id
    if model_id is None:
        raise InvalidParams("learning needs an embedding provider (embeddings is none)", field="embeddings")
    return model_id


def _half(query: str) -> int:
    return hashlib.blake2b(query.encode(), digest_size=8).digest()[0] & 1


async def _learn(rt: Runtime, pairs: list[tuple[str, set[str]]], source: str) -> dict[str, Any]:
    model_id = _model(rt)
    async with rt.db.read() as conn:
        matrix = await conn.batch(lambda r: vectors.matrix_in(r, model_id))
        if matrix is None:
            raise InvalidParams(
                "the catalogue is not embedded yet: run `toolspoke backfill`", field="embeddings"
            )
        ids = [int(i) for i in matrix.ids]
        tools = await conn.batch(lambda r: store.tools_by_ids_in(r, ids))
    key_row = rows_by_key(ids, tools)
    examples = [(q, sorted({key_row[g] for g in gold if g in key_row})) for q, gold in pairs]
    usable = [(q, rows) for q, rows in examples if rows][-MAX_EXAMPLES:]
    if len(usable) < MIN_EXAMPLES:
        raise InvalidParams(
            f"{len(usable)} of {len(pairs)} requests name a tool of this catalogue; learning needs at least "
            f"{MIN_EXAMPLES}",
            field="queries" if source == "queries" else "from_usage",
        )
    texts = [q for q, _ in usable]
    queries = await _embedded(rt, texts)
    halves = [_half(t) for t in texts]
    # seconds of numpy: in a thread
    fitted = await asyncio.to_thread(adapter.fit, matrix, queries, [rows for _, rows in usable], halves)
    learnt, loss, held_out = fitted
    await rt.db.write_batch(
        lambda w: adapter.save_in(w, model_id, learnt, examples=len(usable), source=source, held_out=held_out)
    )
    return {
        "model": model_id,
        "source": source,
        "examples": len(usable),
        "skipped": len(pairs) - len(usable),
        "loss": round(loss, 4),
        "held_out": held_out,
    }


async def _embedded(rt: Runtime, texts: list[str]) -> list[Any]:
    """The requests' vectors as a search embeds them (rows), in the backfill's batch size."""
    provider = rt.semantic.provider
    assert provider is not None  # _model found one
    rows: list[Any] = []
    for start in range(0, len(texts), BATCH):
        part = texts[start : start + BATCH]
        try:
            rows.extend(await provider.embed(part, timeout_s=rt.settings.embeddings_timeout_s * len(part)))
        except EmbeddingError as exc:
            raise UpstreamError(
                f"the embedding provider failed: {exc.reason}", reason="embeddings_failed"
            ) from None
    return rows
