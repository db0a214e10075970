"""Nearest neighbours over the in-memory matrix (pure numpy): exact below EXACT_MAX, a binary
sketch prefilter above it, both honouring the toolkit mask."""

from __future__ import annotations

import numpy as np

from appliance.search import vectors


def clustered(n: int, dim: int = 384, clusters: int = 400, seed: int = 0) -> np.ndarray:
    """Unit vectors around cluster centres, with a shared component as sentence embeddings have."""
    rng = np.random.default_rng(seed)
    common = rng.normal(0, 1, dim)
    centres = rng.normal(0, 1, (clusters, dim)) + 2 * common
    rows = centres[rng.integers(0, clusters, n)] + rng.normal(0, 0.6, (n, dim))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def matrix(data: np.ndarray, kits: np.ndarray | None = None) -> vectors.Matrix:
    n = data.shape[0]
    ids = np.arange(1, n + 1, dtype=np.int64)
    toolkits = kits if kits is not None else np.zeros(n, dtype=np.int64)
    return vectors.Matrix("1", ids, toolkits, toolkits.copy(), data)


def test_exact_search_returns_the_most_similar_tools_best_first() -> None:
    data = clustered(500)
    found = vectors.nearest(matrix(data), data[42], k=5)
    assert found[0] == (43, found[0][1]) and abs(found[0][1] - 1.0) < 1e-5
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)


def test_the_sketch_prefilter_finds_nearly_the_same_top_ten_as_the_exact_scan() -> None:
    data = clustered(30_000)
    exact = matrix(data)
    sketched = vectors.with_sketch(matrix(data))
    rng = np.random.default_rng(1)
    agree = []
    for row in rng.integers(0, data.shape[0], 50):
        query = data[row] + rng.normal(0, 0.02, data.shape[1]).astype(np.float32)
        query /= np.linalg.norm(query)
        want = {t for t, _ in vectors.nearest(exact, query, k=10)}
        got = {t for t, _ in vectors.nearest(sketched, query, k=10)}
        agree.append(len(want & got) / 10)
    assert float(np.mean(agree)) >= 0.9


def test_both_paths_keep_to_the_toolkits_the_caller_may_see() -> None:
    data = clustered(30_000)
    kits = np.arange(data.shape[0], dtype=np.int64) % 3
    for m in (matrix(data, kits), vectors.with_sketch(matrix(data, kits))):
        found = vectors.nearest(m, data[0], k=20, toolkit_ids={1})
        assert len(found) == 20
        assert all(kits[t - 1] == 1 for t, _ in found)
        assert vectors.nearest(m, data[0], k=20, toolkit_ids=set()) == []


def test_the_sketch_distance_counts_every_differing_sign_bit_whatever_the_dimension() -> None:
    for dim in (384, 100, 7):  # 100 and 7 bits leave the last 64-bit word partly padded
        data = clustered(300, dim=dim, clusters=20)
        sketched = vectors.with_sketch(matrix(data))
        assert sketched.sketch is not None and sketched.center is not None
        query = data[5]
        signs = data > sketched.center
        want = (signs != (query > sketched.center)).sum(axis=1)
        got = vectors._hamming(sketched.sketch, vectors._sign_words(query > sketched.center)[0])
        assert got.tolist() == want.tolist()


def test_the_prefilter_keeps_exactly_the_rows_of_the_smallest_distances() -> None:
    rng = np.random.default_rng(4)
    for count, wanted, top in ((10_000, 2_000, 385), (50, 50, 3), (500, 1, 40), (1_000, 999, 2)):
        distance = rng.integers(0, top, size=count).astype(np.uint16)
        chosen = vectors._closest(distance, wanted)
        assert chosen.shape[0] == wanted == len(set(chosen.tolist()))
        # every row closer than the farthest one kept is kept, and none farther
        cut = int(np.sort(distance)[wanted - 1])
        assert int(distance[chosen].max()) == cut
        assert set(np.flatnonzero(distance < cut).tolist()) <= set(chosen.tolist())


def test_a_toolkit_filter_that_admits_every_toolkit_ranks_as_no_filter_does() -> None:
    data = clustered(2_000)
    kits = np.arange(data.shape[0], dtype=np.int64) % 4
    m = matrix(data, kits)
    unfiltered = vectors.nearest(m, data[9], k=30)
    assert vectors.nearest(m, data[9], k=30, toolkit_ids={0, 1, 2, 3, 99}) == unfiltered
    narrowed = vectors.nearest(m, data[9], k=30, toolkit_ids={0, 1, 2})
    assert all(kits[t - 1] != 3 for t, _ in narrowed) and len(narrowed) == 30


def test_among_ranks_exactly_the_given_tools_and_skips_those_without_a_vector() -> None:
    data = clustered(30_000)  # a large catalogue's matrix: int16 rows and a scale each, a sketch
    rows, scale = vectors._quantised(data)
    m = matrix(data)
    m = vectors.with_sketch(vectors.Matrix("1", m.ids, m.toolkits, m.groups, rows, scale))
    query = data[7]
    candidates = [8, 100, 2_000, 29_999, 123_456]  # the last has no vector
    got = vectors.among(m, candidates, query, k=3)
    exact = sorted(((t, float(data[t - 1] @ query)) for t in candidates[:-1]), key=lambda p: -p[1])[:3]
    assert [t for t, _ in got] == [t for t, _ in exact]
    assert all(abs(a - b) < 1e-3 for (_, a), (_, b) in zip(got, exact, strict=True))
    assert got[0] == (8, got[0][1]) and abs(got[0][1] - 1.0) < 1e-3
    assert vectors.among(m, [], query, k=3) == [] and vectors.among(m, [123_456], query, k=3) == []
    assert vectors.among(m, candidates, query, k=0) == []
