"""Backfill: embed the tools that need it, in small batches, resumable, never blocking serving.

The database is the only progress record: each batch's vectors are committed with the hash of
their text, and the next plan skips every tool whose stored model and hash match. A crash loses
at most the batch in flight (never written, so never counted as embedded); a restart plans
again and goes on. Writes are one short transaction per batch, so the single writer is never
held for long and searches (readers) are never blocked.

``toolspoke backfill`` runs it in the foreground with a progress bar; ``serve`` runs
``BackfillTask`` in the background, woken by imports and re-syncs in the same process and
polling every ``POLL_S`` for tools imported by another process (the CLI).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from appliance.db import SyncReader
from appliance.errors import ConfigError
from appliance.gateway.runtime import Runtime
from appliance.search import vectors
from appliance.search.embedders import EmbeddingError

log = logging.getLogger(__name__)

BATCH = 32
COPY_BATCH = 256
POLL_S = 30.0
# A batch of documents is bigger than one query: give it many query deadlines, at least 30 s.
BATCH_DEADLINE_FACTOR = 15.0
MIN_BATCH_DEADLINE_S = 30.0
RETRY_S = 60.0


@dataclass
class BackfillReport:
    model: str
    tools: int  # active tools in the catalogue
    needed: int  # tools that needed a vector computed (after reuse)
    embedded: int  # vectors computed and written by this run
    reused: int  # vectors copied from a tool with the same text (a re-imported toolkit)
    removed: int  # stale vectors of deleted tools dropped
    seconds: float

    @property
    def tools_per_s(self) -> float:
        return self.embedded / self.seconds if self.seconds > 0 else 0.0


Progress = Callable[[int, int], None]


async def backfill(rt: Runtime, *, batch: int = BATCH, on_progress: Progress | None = None) -> BackfillReport:
    """Embed every active tool that lacks a current vector; see the module doc."""
    provider = rt.semantic.provider
    if provider is None:
        raise ConfigError(
            "no embedding provider is configured (set embeddings = local or openai)", field="embeddings"
        )
    model_id = provider.model_id
    started = time.perf_counter()

    def plan(reader: SyncReader) -> tuple[list[vectors.Todo], int, dict[int, tuple[int, int]]]:
        todo, total = vectors.plan_in(reader, model_id)
        return todo, total, vectors.reusable_in(reader, model_id, todo)

    async with rt.db.read() as conn:
        todo, total, reusable = await conn.batch(plan)
    copied = 0
    pairs = [(t, *reusable[t.tool_id]) for t in todo if t.tool_id in reusable]
    for start in range(0, len(pairs), COPY_BATCH):
        async with rt.db.write() as tx:
            copied += await vectors.copy(tx, model_id, pairs[start : start + COPY_BATCH])
    if copied:
        async with rt.db.read() as conn:
            todo, total = await conn.batch(lambda r: vectors.plan_in(r, model_id))
    deadline = max(MIN_BATCH_DEADLINE_S, rt.settings.embeddings_timeout_s * BATCH_DEADLINE_FACTOR)
    done = 0
    if on_progress:
        on_progress(0, len(todo))
    for start in range(0, len(todo), max(1, batch)):
        chunk = todo[start : start + batch]
        rows = await provider.embed([t.text for t in chunk], timeout_s=deadline)
        async with rt.db.write() as tx:
            await vectors.store(tx, model_id, list(zip(chunk, rows, strict=True)))
        done += len(chunk)
        if on_progress:
            on_progress(done, len(todo))
    async with rt.db.write() as tx:
        removed = await vectors.sweep(tx)
    return BackfillReport(model_id, total, len(todo), done, copied, removed, time.perf_counter() - started)


class BackfillTask:
    """The background backfill of a serving appliance."""

    def __init__(self, rt: Runtime):
        self.rt = rt
        self._task: asyncio.Task[None] | None = None
        self.last: BackfillReport | None = None

    def start(self) -> None:
        if self.rt.settings.embeddings != "none" and self._task is None:
            self._task = asyncio.create_task(self._run(), name="backfill")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        wake = self.rt.semantic.wake_event()
        provider = self.rt.semantic.provider
        warm = getattr(provider, "warm", None)
        if warm is not None:
            try:
                await warm()  # the first search should not pay for loading the local model
            except Exception:
                log.exception("loading the local model failed; searches stay lexical")
        full = True  # plan everything at start and when woken (re-syncs change texts)
        while True:
            try:
                if full or await self._anything_missing():
                    report = await backfill(self.rt)
                    if report.embedded or report.removed:
                        self.last = report
                        log.info(
                            "backfill: %d tools embedded, %d stale vectors removed in %.1f s",
                            report.embedded,
                            report.removed,
                            report.seconds,
                        )
                wait = POLL_S
            except (EmbeddingError, ConfigError) as exc:
                reason = exc.reason if isinstance(exc, EmbeddingError) else exc.public_message
                log.warning("backfill paused: %s; retrying in %g s", reason, RETRY_S)
                wait = RETRY_S
            except Exception:
                log.exception("backfill failed; retrying in %g s", RETRY_S)
                wait = RETRY_S
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), wait)
                full = True
            except TimeoutError:
                full = False

    async def _anything_missing(self) -> bool:
        model_id = self.rt.semantic.model_id
        if model_id is None:
            return False
        async with self.rt.db.read() as conn:
            missing = await conn.batch(lambda r: vectors.unembedded_toolkits_in(r, model_id))
        return bool(missing)
