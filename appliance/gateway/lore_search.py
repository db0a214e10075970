"""``search_lore``'s ranking: a Lore toolkit's passages for a query, by words and by meaning.

The lexical list is the chunk index's BM25 (``lore/store.py``); when the semantic pass is on
(a provider configured, the kill switch on, the breaker closed) and the toolkit's passages are
embedded (``gateway/backfill.py``), the nearest passages by cosine (``lore/vectors.py``) are
fused with it exactly as tools are (``search/hybrid.fuse``, without the service term: every
passage of a toolkit is of one service). Until the passages are embedded, or whenever the
provider fails, the answer is the lexical one, and says so (``ranking``).

The query's vector is computed between two reads, so no connection is held while the model
(or a remote provider) works.
"""

from __future__ import annotations

from typing import Any, Literal

from appliance.gateway.runtime import Runtime
from appliance.lore import store as lore_store
from appliance.lore import vectors as lore_vectors
from appliance.search import hybrid
from appliance.search import vectors as tool_vectors
from appliance.search.text import match_expression

Ranking = Literal["lexical", "hybrid"]


async def passages(
    rt: Runtime, toolkit_id: int, query: str, *, limit: int
) -> tuple[list[dict[str, Any]], Ranking]:
    """The best ``limit`` passages of the toolkit for ``query``, and how they were ranked."""
    match = match_expression(query)
    model_id = rt.semantic.model_id
    setting_on = rt.settings.semantic_search

    def lexical_and_switch(reader: Any) -> tuple[list[tuple[int, float]], bool]:
        lexical = lore_store.ranked_in(reader, toolkit_id, match, limit=hybrid.CANDIDATES) if match else []
        # No query is embedded for a toolkit with no passage embedded yet: it would find nothing.
        on = (
            model_id is not None
            and tool_vectors.semantic_on_in(reader, setting_on)
            and lore_vectors.any_in(reader, toolkit_id, model_id)
        )
        return lexical, on

    async with rt.db.read() as conn:
        lexical, semantic_on = await conn.batch(lexical_and_switch)
    vector = await rt.semantic.query_vector(query) if semantic_on else None
    blob = None if vector is None else vector.astype("<f4").tobytes()

    def ranked(reader: Any) -> tuple[list[dict[str, Any]], Ranking]:
        near = []
        if blob is not None and model_id is not None:
            near = lore_vectors.nearest_in(reader, toolkit_id, model_id, blob, limit=hybrid.CANDIDATES)
        if not near:
            return lore_store.passages_in(reader, lexical[:limit], match), "lexical"
        fused = hybrid.fuse(lexical, near, limit=limit)
        return lore_store.passages_in(reader, [(f.tool_id, f.score) for f in fused], match), "hybrid"

    async with rt.db.read() as conn:
        return await conn.batch(ranked)
