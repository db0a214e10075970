"""Backfill against a real database and a real embeddings endpoint on loopback: what gets
embedded, what is reused, what a model change does, and that search then goes hybrid."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from appliance.gateway.backfill import backfill
from appliance.gateway.imports import import_catalog
from appliance.gateway.runtime import Runtime
from appliance.gateway.searching import search
from appliance.gateway.semantic_admin import switch
from appliance.search import vectors
from tests.support.embeddings_server import EmbeddingsServer, with_provider_runtime

T = TypeVar("T")
TOOLS = [
    ("slides", "create_presentation", "Create a new presentation file with a title slide."),
    ("slides", "add_slide", "Add a slide with a heading and bullet points to a presentation."),
    ("files", "write_file", "Write text content to a file on disk."),
    ("files", "read_file", "Read the content of a file from disk."),
    ("weather", "get_forecast", "Weather forecast for a city for the next days."),
]


def catalogue(path: Path, tools: list[tuple[str, str, str]]) -> str:
    lines = [
        json.dumps({"toolkit": k, "name": n, "description": d, "input_schema": {"type": "object"}})
        for k, n, d in tools
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def with_runtime(
    tmp_path: Path, server: EmbeddingsServer, work: Callable[[Runtime], Awaitable[T]], model: str = "bow"
) -> T:
    return with_provider_runtime(tmp_path / "data", server.base_url, work, model)


def test_every_tool_is_embedded_once_and_a_second_run_embeds_nothing(tmp_path: Path) -> None:
    source = catalogue(tmp_path / "c.jsonl", TOOLS)
    with EmbeddingsServer() as server:

        async def work(rt: Runtime) -> tuple[int, int, int]:
            await import_catalog(rt, source, slug="kit")
            first = await backfill(rt, batch=2)
            second = await backfill(rt, batch=2)
            return first.embedded, second.embedded, first.tools

        first, second, tools = with_runtime(tmp_path, server, work)
    assert (first, second, tools) == (5, 0, 5)
    assert len(server.requests) == 3  # batches of 2, 2, 1
    assert sorted(Counter(server.answered).values()) == [1] * 5


def test_a_replace_keeps_the_vectors_of_unchanged_tools_and_embeds_only_the_changed_one(
    tmp_path: Path,
) -> None:
    changed = [*TOOLS[:-1], ("weather", "get_forecast", "Hourly weather forecast and rain radar for a city.")]
    with EmbeddingsServer() as server:

        async def work(rt: Runtime) -> tuple[int, int, int]:
            await import_catalog(rt, catalogue(tmp_path / "a.jsonl", TOOLS), slug="kit")
            # A replace keeps the tools' ids (it re-syncs), so their vectors stay theirs.
            await import_catalog(rt, catalogue(tmp_path / "z.jsonl", [("z", "zz", "Last tool.")]), slug="z")
            await backfill(rt)
            await import_catalog(rt, catalogue(tmp_path / "b.jsonl", changed), slug="kit", replace=True)
            again = await backfill(rt)
            return again.embedded, again.reused, again.removed

        embedded, reused, removed = with_runtime(tmp_path, server, work)
    assert (embedded, reused, removed) == (1, 0, 0)
    assert server.requests[-1] == [t for t in server.requests[-1] if "rain radar" in t]


def test_a_model_change_re_embeds_every_tool(tmp_path: Path) -> None:
    source = catalogue(tmp_path / "c.jsonl", TOOLS)
    with EmbeddingsServer() as server:

        async def first(rt: Runtime) -> int:
            await import_catalog(rt, source, slug="kit")
            return (await backfill(rt)).embedded

        async def second(rt: Runtime) -> int:
            return (await backfill(rt)).embedded

        assert with_runtime(tmp_path, server, first, model="bow-1") == 5
        assert with_runtime(tmp_path, server, second, model="bow-2") == 5
        assert with_runtime(tmp_path, server, second, model="bow-2") == 0


def test_search_is_hybrid_once_the_catalogue_is_embedded_and_lexical_before(tmp_path: Path) -> None:
    source = catalogue(tmp_path / "c.jsonl", TOOLS)
    with EmbeddingsServer() as server:

        async def work(rt: Runtime) -> tuple[str, str, str, str]:
            await import_catalog(rt, source, slug="kit")
            before = await search(rt, "presentation slide")
            await backfill(rt)
            after = await search(rt, "presentation slide")
            explicit = await search(rt, "presentation slide", ranking="lexical")
            return before.ranking, before.reason, after.ranking, explicit.ranking

        before, reason, after, explicit = with_runtime(tmp_path, server, work)
    assert (before, reason) == ("lexical", "not_embedded")
    assert after == "hybrid"
    assert explicit == "lexical"


def test_a_group_every_tool_of_a_toolkit_shares_is_embedded_as_the_toolkit_slug(tmp_path: Path) -> None:
    shared = [("chatgpt_plugins", name, description) for _, name, description in TOOLS[:2]]
    with EmbeddingsServer() as server:

        async def work(rt: Runtime) -> None:
            await import_catalog(rt, catalogue(tmp_path / "a.jsonl", shared), slug="plugins")
            await import_catalog(rt, catalogue(tmp_path / "b.jsonl", TOOLS[2:]), slug="kit")
            await backfill(rt)

        with_runtime(tmp_path, server, work)
    texts = sorted(text for batch in server.requests for text in batch)
    assert [t.split(" ", 1)[0] for t in texts] == ["files", "files", "plugins", "plugins", "weather"]
    assert not any("chatgpt_plugins" in t for t in texts)


def test_once_a_search_went_hybrid_the_next_embeds_its_query_and_a_switched_off_one_sends_none(
    tmp_path: Path,
) -> None:
    source = catalogue(tmp_path / "c.jsonl", TOOLS)
    with EmbeddingsServer() as server:

        async def work(rt: Runtime) -> tuple[list[str], int, list[str]]:
            await import_catalog(rt, source, slug="kit")
            await backfill(rt)
            before = len(server.requests)
            served = [(await search(rt, q)).ranking for q in ("presentation slide", "read a file")]
            asked = server.query_requests(before)
            await switch(rt, False)
            before = len(server.requests)
            served += [(await search(rt, q)).ranking for q in ("weather in Paris", "write text")]
            return served, asked, [t for batch in server.requests[before:] for t in batch]

        served, asked, after_off = with_runtime(tmp_path, server, work)
    assert served == ["hybrid", "hybrid", "lexical", "lexical"]
    assert asked == 2
    assert after_off == []


def test_above_the_exact_scan_size_the_matrix_is_int16_and_ranks_as_the_float32_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    many = [(k, f"{n}_{i}", f"{d} Variant {i}.") for i in range(6) for k, n, d in TOOLS]
    with EmbeddingsServer() as server:

        async def work(rt: Runtime) -> tuple[vectors.Matrix, vectors.Matrix, np.ndarray]:
            await import_catalog(rt, catalogue(tmp_path / "c.jsonl", many), slug="kit")
            await backfill(rt, batch=7)
            model_id = rt.semantic.model_id
            assert model_id is not None
            async with rt.db.read() as conn:
                wide = await conn.batch(lambda r: vectors.matrix_in(r, model_id))
                monkeypatch.setattr(vectors, "EXACT_MAX", 10)
                monkeypatch.setattr(vectors, "PREFILTER", 12)
                vectors._CACHE.clear()
                narrow = await conn.batch(lambda r: vectors.matrix_in(r, model_id))
            query = await rt.semantic.query_vector("weather forecast for a city")
            assert wide is not None and narrow is not None and query is not None
            return wide, narrow, query

        wide, narrow, query = with_runtime(tmp_path, server, work)
    assert wide.vectors.dtype == np.float32 and wide.sketch is None
    assert narrow.vectors.dtype == np.int16 and narrow.scale is not None and narrow.sketch is not None
    assert np.array_equal(wide.ids, narrow.ids) and np.array_equal(wide.groups, narrow.groups)
    assert len(wide.ids) == len(many)
    assert np.allclose(wide.vectors, narrow.vectors * narrow.scale[:, None], atol=1e-4)
    exact = [t for t, _ in vectors.nearest(wide, query, k=5)]
    sketched = [t for t, _ in vectors.nearest(narrow, query, k=5)]
    assert sketched[0] == exact[0] and len(set(exact) & set(sketched)) >= 4


def test_a_request_of_several_asks_is_ranked_ask_by_ask_with_one_call_to_the_provider(tmp_path: Path) -> None:
    source = catalogue(tmp_path / "c.jsonl", TOOLS)
    request = "Create a new presentation with a title slide. Then get the weather forecast for Paris."
    with EmbeddingsServer() as server:

        async def work(rt: Runtime) -> tuple[list[list[str]], Any, Any]:
            await import_catalog(rt, source, slug="kit")
            await backfill(rt)
            before = len(server.requests)
            several = await search(rt, request, limit=3)
            one = await search(rt, "weather forecast for a city", limit=3)
            return server.requests[before:], several, one

        sent, several, one = with_runtime(tmp_path, server, work)
    # the request and its two asks in one call to the endpoint; a one-ask request alone
    assert sent == [
        [request, "Create a new presentation with a title slide.", "get the weather forecast for Paris."],
        ["weather forecast for a city"],
    ]
    assert several.ranking == "hybrid" and one.ranking == "hybrid"
    assert {r.tool.name for r in several.results[:2]} == {
        "kit__slides_create_presentation",
        "kit__weather_get_forecast",
    }
    assert all(r.ask_part is not None for r in several.results)
    assert all(r.ask_part is None for r in one.results)
