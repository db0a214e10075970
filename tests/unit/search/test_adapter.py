"""The query adapter (search/adapter.py): applying it, learning it, and the shipped one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from appliance.search import adapter, vectors
from appliance.search.adapter import Examples, QueryAdapter
from appliance.search.embedders import LocalEmbedder
from appliance.search.vectors import document_text

REPO = Path(__file__).resolve().parents[3]
METATOOL = REPO / "bench" / "data" / "retrieval" / "metatool"


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def test_a_zero_adapter_changes_nothing_and_any_adapter_returns_unit_vectors() -> None:
    rng = np.random.default_rng(1)
    v = unit(rng.normal(size=8)).astype(np.float32)
    assert np.allclose(QueryAdapter(np.zeros((8, 8), np.float32), "m@").apply(v), v)
    moved = QueryAdapter(rng.normal(size=(8, 8)).astype(np.float32), "m@").apply(v)
    assert abs(float(np.linalg.norm(moved)) - 1.0) < 1e-5 and not np.allclose(moved, v)
    # a vector of another size (another model) is left as it is; an ask with no vector stays None
    other = np.ones(5, np.float32)
    assert QueryAdapter(np.eye(8, dtype=np.float32), "m@").apply(other) is other
    head, asks = QueryAdapter(np.eye(8, dtype=np.float32), "m@").apply_all(v, [None, v])
    assert asks[0] is None and asks[1] is not None
    assert np.allclose(head, v) and np.allclose(asks[1], v)


def test_a_missing_or_damaged_adapter_file_means_no_adapter_not_a_failing_search(tmp_path: Path) -> None:
    assert adapter.load(tmp_path / "absent.npz") is None
    (tmp_path / "junk.npz").write_bytes(b"not a numpy archive")
    assert adapter.load(tmp_path / "junk.npz") is None
    np.savez(tmp_path / "wide.npz", matrix=np.zeros((3, 4)), model=np.array("m@"))
    assert adapter.load(tmp_path / "wide.npz") is None
    np.savez(tmp_path / "nan.npz", matrix=np.full((4, 4), np.nan), model=np.array("m@"))
    assert adapter.load(tmp_path / "nan.npz") is None
    np.savez(tmp_path / "good.npz", matrix=np.eye(4), model=np.array("m@"))
    good = adapter.load(tmp_path / "good.npz")
    assert good is not None and good.model == "m@" and adapter.for_model("m@x", tmp_path / "good.npz") is good


def test_the_adapter_applies_only_to_the_model_it_was_learned_for() -> None:
    a = QueryAdapter(np.zeros((4, 4), np.float32), "local/all-MiniLM-L6-v2-int8@")
    assert a.applies_to("local/all-MiniLM-L6-v2-int8@0123456789ab/128")
    assert not a.applies_to("http/text-embedding-3-small")
    assert not a.applies_to(None)


def _world(seed: int, count: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Tools, and requests that each sit near a fixed rotation of their tool: raw cosines rank
    the wrong tools, a linear map can undo it."""
    rng = np.random.default_rng(seed)
    dim = 16
    tools = unit(rng.normal(size=(40, dim)))
    twist = np.linalg.qr(rng.normal(size=(dim, dim)))[0]
    gold = [int(g) for g in rng.integers(0, 40, size=count)]
    queries = unit(tools[gold] @ twist + 0.1 * rng.normal(size=(count, dim)))
    return tools, queries, gold


def _hits(tools: np.ndarray, queries: np.ndarray, gold: list[int], a: np.ndarray | None) -> int:
    moved = queries if a is None else unit(queries + queries @ a)
    return int(sum(int(np.argmax(tools @ q)) == g for q, g in zip(moved, gold, strict=True)))


def test_learning_moves_requests_to_the_tools_they_needed_and_generalises_to_new_requests() -> None:
    tools, queries, gold = _world(7, 400)
    learnt, loss = adapter.train(
        [Examples(queries[:300], [[g] for g in gold[:300]], tools)], decay=1e-4, steps=300, rate=1e-2
    )
    assert loss < 1.0
    # requests it never saw, for the same tools
    new_queries, new_gold = queries[300:], gold[300:]
    before, after = _hits(tools, new_queries, new_gold, None), _hits(tools, new_queries, new_gold, learnt)
    assert before < 30 and after > 80, (before, after)


def test_the_decay_holds_the_adapter_near_no_change() -> None:
    tools, queries, gold = _world(3, 100)
    examples = [Examples(queries, [[g] for g in gold], tools)]
    loose, _ = adapter.train(examples, decay=1e-4, steps=100, rate=1e-2)
    tight, _ = adapter.train(examples, decay=100.0, steps=100, rate=1e-2)
    assert np.linalg.norm(tight) < 0.1 * np.linalg.norm(loose)


def test_learning_is_deterministic_and_needs_examples() -> None:
    tools, queries, gold = _world(5, 50)
    examples = [Examples(queries, [[g] for g in gold], tools)]
    first, _ = adapter.train(examples, steps=20)
    second, _ = adapter.train(examples, steps=20)
    assert np.array_equal(first, second)
    with pytest.raises(ValueError, match="no examples"):
        adapter.train([Examples(np.zeros((0, 16)), [], tools)])


def test_the_shipped_adapter_is_for_the_bundled_model() -> None:
    shipped = adapter.load()
    assert shipped is not None
    assert shipped.matrix.shape == (384, 384) and np.isfinite(shipped.matrix).all()
    assert shipped.applies_to(LocalEmbedder().model_id)
    assert adapter.for_model("http/text-embedding-3-small") is None


def test_the_shipped_adapter_ranks_the_requests_it_learned_from_better_with_the_bundled_model() -> None:
    """A change of model without learning the adapter again would lose this."""
    embedder = LocalEmbedder()
    catalogue = [json.loads(line) for line in (METATOOL / "catalog.jsonl").read_text().splitlines() if line]
    texts = [
        document_text("", t["toolkit"], t["name"], t["description"], t["input_schema"]) for t in catalogue
    ]
    tools = embedder.embed_sync(texts)
    row_of = {f"{t['toolkit']}/{t['name']}": i for i, t in enumerate(catalogue)}
    queries = [json.loads(line) for line in (METATOOL / "queries-dev.jsonl").read_text().splitlines()[:80]]
    shipped = adapter.load()
    assert shipped is not None
    ranks: dict[str, list[int]] = {"raw": [], "moved": []}
    for q in queries:
        gold = row_of[q["gold"][0]]
        vector = embedder.embed_sync([q["query"]])[0]
        for kind, v in (("raw", vector), ("moved", shipped.apply(vector))):
            scores = tools @ v
            ranks[kind].append(int((scores > scores[gold]).sum()) + 1)
    mrr = {kind: float(np.mean([1 / r for r in rs])) for kind, rs in ranks.items()}
    assert mrr["moved"] > mrr["raw"] + 0.05, mrr


def deployment(
    tools: int, requests: int, seed: int = 2
) -> tuple[vectors.Matrix, np.ndarray, list[list[int]]]:
    """Requests that sit near a fixed rotation of the tool they need."""
    rng = np.random.default_rng(seed)
    dim = 32
    rows = unit(rng.normal(size=(tools, dim)))
    twist = np.linalg.qr(rng.normal(size=(dim, dim)))[0]
    gold = [int(g) for g in rng.integers(0, tools, size=requests)]
    queries = unit(rows[gold] @ twist + 0.05 * rng.normal(size=(requests, dim)))
    ids = np.arange(1, tools + 1, dtype=np.int64)
    kits = np.zeros(tools, dtype=np.int64)
    return vectors.Matrix("1", ids, kits, kits.copy(), rows), queries, [[g] for g in gold]


def test_fitting_on_a_deployment_keeps_to_its_candidate_budget_and_checks_itself_on_held_out_halves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    matrix, queries, gold = deployment(tools=3_000, requests=200)
    monkeypatch.setattr(adapter, "CANDIDATES_MAX", 500)
    seen: list[int] = []
    real = adapter.train

    def counting(sets: list[adapter.Examples], **kw: object) -> tuple[np.ndarray, float]:
        seen.append(sets[0].tools.shape[0])
        return real(sets, steps=150, rate=1e-2, decay=1e-4)

    monkeypatch.setattr(adapter, "train", counting)
    halves = [i % 2 for i in range(len(gold))]
    learnt, loss, held = adapter.fit(matrix, list(queries), gold, halves)
    # every needed tool is a candidate, and no more than the budget in all
    assert seen and all(n <= 500 for n in seen) and seen[-1] >= len({g[0] for g in gold})
    assert held["queries"] > 0 and held["mrr_with"] > held["mrr_without"] + 0.2, held
    assert learnt.shape == (32, 32) and loss < 1.0
    # what search does with it: the needed tool comes first for most requests
    moved = adapter.QueryAdapter(learnt, "")
    first = sum(
        int(np.argmax(matrix.vectors @ moved.apply(q))) == g[0] for q, g in zip(queries, gold, strict=True)
    )
    assert first > 0.8 * len(gold)
