"""Operating the semantic pass: its status and the run-time kill switch (CLI and admin API)."""

from __future__ import annotations

from typing import Any

from appliance.gateway.runtime import Runtime
from appliance.gateway.semantic import provider_kind
from appliance.search import adapter, vectors


async def switch(rt: Runtime, enabled: bool) -> None:
    """Turn the semantic pass on or off for every process using this database, at once."""
    async with rt.db.write() as tx:
        await vectors.set_semantic_switch(tx, enabled)
    if not enabled:
        rt.semantic.note_decision(semantic=False)  # no query is embedded ahead of the next search


async def status(rt: Runtime) -> dict[str, Any]:
    sem = rt.semantic
    model_id = sem.model_id

    def read(reader: Any) -> tuple[str | None, tuple[int, int], Any, dict[str, object] | None]:
        covered = vectors.coverage_in(reader, model_id) if model_id else (0, 0)
        moved = adapter.for_search_in(reader, model_id, enabled=rt.settings.search_query_adapter)
        learned = adapter.learned_info_in(reader, model_id)
        return vectors.semantic_switch_setting_in(reader), covered, moved, learned

    async with rt.db.read() as conn:
        switch_value, (embedded, tools), moved, learned = await conn.batch(read)
    enabled = rt.settings.semantic_search if switch_value is None else switch_value != "off"
    return {
        "enabled": enabled,
        "provider": provider_kind(rt.settings),
        "model": model_id,
        # whether searches move the request's vector by a query adapter (search/adapter.py), and
        # the one this deployment learned (`toolspoke learn`), which then is the one used
        "query_adapter": moved is not None,
        "learned_adapter": learned,
        "embedded": embedded,
        "tools": tools,
        "breaker_open": sem.breaker_open(),
        "counts": dict(sem.counts),
        "last_error": sem.last_error,
    }
