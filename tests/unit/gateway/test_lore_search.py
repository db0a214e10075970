"""search_lore by meaning with the bundled model, on a real database: lexical until the
passages are embedded, hybrid after the backfill, lexical again with the kill switch off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from appliance.gateway import lore, pipeline
from appliance.gateway.backfill import backfill
from appliance.gateway.runtime import Runtime
from appliance.models import OPERATOR
from appliance.search import vectors
from tests.support.runtimes import on_runtime

LOCAL = {"TOOLSPOKE_EMBEDDINGS": "local"}
DOCS = {
    "pets.md": "# Companions\n\nFelines purr, nap in the sun and chase mice around the barn.\n",
    "kitchen.md": "# Baking\n\nThe oven bakes sourdough loaves before dawn.\n",
    "weather.md": "# Storms\n\nThunder rolls over the hills and rain floods the valley.\n",
}


async def search(rt: Runtime, query: str) -> dict[str, Any]:
    result = await pipeline.call_tool(rt, OPERATOR, "kb__search_lore", {"query": query, "limit": 3})
    assert not result.is_error, result.content
    value: dict[str, Any] = orjson.loads(result.content[0]["text"])
    assert value == result.structured  # text and structured content agree
    return value


def test_a_question_in_other_words_finds_its_passage_once_the_passages_are_embedded(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")

    async def work(rt: Runtime) -> None:
        await lore.import_lore(rt, str(root), slug="kb")
        # None of the question's words is in any passage: words alone find nothing.
        before = await search(rt, "cats kittens")
        assert before["ranking"] == "lexical" and before["passages"] == []
        report = await backfill(rt)
        assert report.passages == 3
        found = await search(rt, "cats kittens")
        assert found["ranking"] == "hybrid"
        # embedded now, not before: with no passage embedded the query was not sent to the model
        assert rt.semantic.counts["query_cache_hits"] == 0
        assert found["passages"][0]["path"] == "pets.md"
        assert "Felines purr" in found["passages"][0]["snippet"]  # its opening words
        # words still count: a passage that has them stays first
        worded = await search(rt, "sourdough")
        assert worded["ranking"] == "hybrid" and worded["passages"][0]["path"] == "kitchen.md"
        assert "«sourdough»" in worded["passages"][0]["snippet"]
        assert (await backfill(rt)).passages == 0  # nothing left to embed
        async with rt.db.write() as tx:
            await vectors.set_semantic_switch(tx, False)
        off = await search(rt, "cats kittens")
        assert off["ranking"] == "lexical" and off["passages"] == []

    on_runtime(tmp_path, work, env=LOCAL)
