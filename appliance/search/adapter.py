"""The query adapter: a learned linear map that moves a request's vector towards the tools such
requests lead to. Numpy, and the ``learned_adapters`` table (migration 0028) for one learned on
this deployment (``gateway/learning.py``, ``toolspoke learn``), which replaces the shipped one.

The bundled model (all-MiniLM-L6-v2) was trained on sentence pairs, not on requests and tool
descriptions: "my three-year-old is throwing a tantrum" lands far from a learning-games app. The
adapter is the residual map

    q' = normalise(q + q A)

applied to the request's vector and its asks' (never to the tools', so a catalogue's vectors
stay valid whether it is on or off), with A learned from example requests and the tools they
needed: a softmax over each example's catalogue by cosine (temperature ``TEMPERATURE``), the
gold tools' share maximised, with a weight decay on A that keeps it close to no change. One
matrix product per vector (384 x 384: microseconds).

The shipped A (``learned/query-adapter.npz``, ``tests/bench/train_adapter.py``) is learned from
the dev queries of the four bench sets. In two-fold cross-validation (learned on one half, scored
on the other) it raises nDCG@10 on all four; trained on three sets and scored on the fourth,
whose catalogue it never saw, it changes the mean by +0.001 (docs/search.md, "Query adapter").
So it helps requests for tools like those it learned from and leaves other catalogues where
they were; the decay was chosen so.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from appliance.db import SyncReader, SyncWriter
from appliance.search.vectors import Matrix, _dot, _rows

log = logging.getLogger(__name__)

ADAPTER_FILE = Path(__file__).parent / "learned" / "query-adapter.npz"
# What training uses unless told otherwise (docs/search.md, "Query adapter": the decay
# with the best cross-validated figures that did not lower a catalogue the adapter never saw).
DECAY = 0.05
STEPS = 200
TEMPERATURE = 20.0
RATE = 1e-3


@dataclass(frozen=True)
class QueryAdapter:
    matrix: np.ndarray  # float32 (d, d): A
    model: str  # the model id prefix it was learned for: vectors of another model are left as they are

    def applies_to(self, model_id: str | None) -> bool:
        return model_id is not None and model_id.startswith(self.model)

    def apply(self, vector: np.ndarray) -> np.ndarray:
        """``vector`` moved by the adapter, normalised (a vector of another size: unchanged)."""
        if vector.shape != (self.matrix.shape[0],):
            return vector
        moved = vector.astype(np.float32) + vector.astype(np.float32) @ self.matrix
        norm = float(np.linalg.norm(moved))
        out: np.ndarray = moved / norm if norm > 0 else vector
        return out

    def apply_all(
        self, vector: np.ndarray, asks: Sequence[np.ndarray | None]
    ) -> tuple[np.ndarray, list[np.ndarray | None]]:
        """A request's vector and its asks' (None: an ask the provider could not place), moved."""
        return self.apply(vector), [None if v is None else self.apply(v) for v in asks]


@functools.cache
def load(path: Path = ADAPTER_FILE) -> QueryAdapter | None:
    """The shipped adapter, or None when its file is absent or unreadable: search then ranks as
    it would without one (said once in the log), rather than failing."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            matrix = np.asarray(data["matrix"], dtype=np.float32)
            model = str(data["model"])
    except (OSError, ValueError, KeyError, EOFError) as exc:
        log.warning("query adapter %s unreadable (%s); searches go without it", path, exc)
        return None
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or not np.isfinite(matrix).all():
        log.warning("query adapter %s holds no square finite matrix; searches go without it", path)
        return None
    return QueryAdapter(matrix, model)


def for_model(model_id: str | None, path: Path = ADAPTER_FILE) -> QueryAdapter | None:
    """The adapter for vectors of ``model_id``, or None."""
    adapter = load(path)
    return adapter if adapter is not None and adapter.applies_to(model_id) else None


@dataclass
class Examples:
    """One catalogue's example requests: their vectors, the rows of the tools each needed (in
    ``tools``), and the catalogue's tool vectors (normalised rows)."""

    queries: np.ndarray  # (n, d)
    gold: list[list[int]]  # for each request, rows of ``tools``; never empty
    tools: np.ndarray  # (m, d)


def _gradient(a: np.ndarray, ex: Examples, temperature: float) -> tuple[np.ndarray, float]:
    """The mean loss over ``ex`` and its gradient in A: the loss of one request is
    log(sum over all tools of e^z) - log(sum over its gold tools of e^z), z = temperature x
    the cosine-like score of the moved request with each tool."""
    q = ex.queries.astype(np.float64)
    z = temperature * (q + q @ a) @ ex.tools.T.astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    every = e.sum(axis=1)
    share = e / every[:, None]
    gold_share = np.zeros_like(share)
    loss = 0.0
    for i, rows in enumerate(ex.gold):
        mass = e[i, rows].sum()
        gold_share[i, rows] = e[i, rows] / mass
        loss += float(np.log(every[i]) - np.log(mass))
    count = len(ex.gold)
    d_moved = temperature * (share - gold_share) @ ex.tools.astype(np.float64) / count
    return q.T @ d_moved, loss / count


def train(
    sets: Sequence[Examples],
    *,
    decay: float = DECAY,
    steps: int = STEPS,
    temperature: float = TEMPERATURE,
    rate: float = RATE,
) -> tuple[np.ndarray, float]:
    """A learned from ``sets`` (each catalogue's mean loss counts alike, so a large set does not
    drown a small one), by full-batch Adam from A = 0; and the final mean loss. Deterministic."""
    sets = [s for s in sets if s.gold]
    if not sets:
        raise ValueError("no examples to learn from")
    dim = sets[0].queries.shape[1]
    a = np.zeros((dim, dim))
    first = np.zeros_like(a)
    second = np.zeros_like(a)
    loss = 0.0
    for step in range(1, steps + 1):
        grad = np.zeros_like(a)
        loss = 0.0
        for ex in sets:
            g, part = _gradient(a, ex, temperature)
            grad += g
            loss += part
        grad = grad / len(sets) + 2 * decay * a
        loss /= len(sets)
        first = 0.9 * first + 0.1 * grad
        second = 0.999 * second + 0.001 * grad * grad
        a -= rate * (first / (1 - 0.9**step)) / (np.sqrt(second / (1 - 0.999**step)) + 1e-8)
    return a.astype(np.float32), loss


# -- learning with a check on held-out halves (gateway/learning.py) -----------------------------

# Requests that each learning half needs at least; fewer and the half is not scored.
MIN_HALF = 10
# The softmax runs over the tools the requests needed and each request's nearest, at most
# CANDIDATES_MAX in all (those nearest to most requests first): 200 steps over 1,000 requests x
# 8,000 tools is about a minute on one core, whatever the catalogue's size.
NEAREST = 50
CANDIDATES_MAX = 8_000


def fit(
    matrix: Matrix, queries: Sequence[np.ndarray], gold: Sequence[Sequence[int]], halves: Sequence[int]
) -> tuple[np.ndarray, float, dict[str, object]]:
    """A learned from every request (``gold``: rows of ``matrix`` each needed), its loss, and the
    check: an adapter learned on each half (``halves``: 0 or 1 per request) scores the other
    half, the semantic MRR of the needed tools with and without it."""
    every = _rows(matrix, slice(None))
    needed: set[int] = {r for rows in gold for r in rows}
    near: Counter[int] = Counter()
    for q in queries:
        scores = _dot(every, np.asarray(q, dtype=np.float32))
        near.update(np.argpartition(-scores, min(NEAREST, scores.shape[0] - 1))[:NEAREST].tolist())
    room = max(0, CANDIDATES_MAX - len(needed))
    others = [r for r, _ in near.most_common() if r not in needed][:room]
    rows = np.array(sorted(needed | set(others)))
    where = {int(r): i for i, r in enumerate(rows)}
    tools = every[rows]
    vectors = np.stack([np.asarray(q, dtype=np.float32) for q in queries])
    local = [[where[r] for r in g] for g in gold]

    def part(h: int | None) -> Examples:
        keep = [i for i, x in enumerate(halves) if h is None or x == h]
        return Examples(vectors[keep], [local[i] for i in keep], tools)

    before: list[float] = []
    after: list[float] = []
    for h in (0, 1):
        learn_on, score_on = part(h), part(1 - h)
        if len(learn_on.gold) < MIN_HALF or not score_on.gold:
            continue
        moved = QueryAdapter(train([learn_on])[0], "")
        for q, its in zip(score_on.queries, score_on.gold, strict=True):
            before.append(_reciprocal_rank(tools, q, its))
            after.append(_reciprocal_rank(tools, moved.apply(q), its))
    learnt, loss = train([part(None)])
    held_out: dict[str, object] = {
        "queries": len(before),
        "mrr_without": round(float(np.mean(before)), 4) if before else None,
        "mrr_with": round(float(np.mean(after)), 4) if after else None,
    }
    return learnt, loss, held_out


def _reciprocal_rank(tools: np.ndarray, query: np.ndarray, needed: Sequence[int]) -> float:
    scores = tools @ query
    best = max(scores[list(needed)])
    return 1.0 / (1 + int((scores > best).sum()))


# -- one learned on this deployment ---------------------------------------------------------------

# This process's learned adapters by model id, with the time each was learned: a search reads
# only that time (one primary-key lookup) and loads the matrix again when it changed.
_LEARNED: dict[str, tuple[float, QueryAdapter]] = {}


def learned_in(conn: SyncReader, model_id: str) -> QueryAdapter | None:
    """The adapter learned on this deployment for ``model_id`` vectors, or None."""
    row = conn.one("SELECT learned_at FROM learned_adapters WHERE model_id = ?", (model_id,))
    if row is None:
        return None
    cached = _LEARNED.get(model_id)
    if cached is not None and cached[0] == float(row[0]):
        return cached[1]
    full = conn.one("SELECT dim, matrix, learned_at FROM learned_adapters WHERE model_id = ?", (model_id,))
    if full is None:
        return None
    dim = int(full[0])
    matrix = np.frombuffer(bytes(full[1]), dtype=np.float32).reshape(dim, dim).copy()
    adapter = QueryAdapter(matrix, model_id)
    _LEARNED[model_id] = (float(full[2]), adapter)
    return adapter


def for_search_in(conn: SyncReader, model_id: str | None, *, enabled: bool) -> QueryAdapter | None:
    """What a search with ``model_id`` vectors moves its request by: this deployment's learned
    adapter, else the shipped one when it is for this model; None when ``enabled`` is off."""
    if not enabled or model_id is None:
        return None
    return learned_in(conn, model_id) or for_model(model_id)


def save_in(
    w: SyncWriter,
    model_id: str,
    matrix: np.ndarray,
    *,
    examples: int,
    source: str,
    held_out: dict[str, object],
) -> None:
    dim = int(matrix.shape[0])
    w.run(
        "INSERT INTO learned_adapters (model_id, dim, matrix, examples, source, held_out, learned_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (model_id) DO UPDATE SET dim = excluded.dim,"
        " matrix = excluded.matrix, examples = excluded.examples, source = excluded.source,"
        " held_out = excluded.held_out, learned_at = excluded.learned_at",
        (
            model_id,
            dim,
            np.ascontiguousarray(matrix, dtype=np.float32).tobytes(),
            examples,
            source,
            orjson.dumps(held_out).decode(),
            time.time(),
        ),
    )


def forget_in(w: SyncWriter, model_id: str) -> bool:
    """Drop this deployment's adapter for ``model_id``; whether there was one."""
    if w.one("SELECT 1 FROM learned_adapters WHERE model_id = ?", (model_id,)) is None:
        return False
    w.run("DELETE FROM learned_adapters WHERE model_id = ?", (model_id,))
    return True


def learned_info_in(conn: SyncReader, model_id: str | None) -> dict[str, object] | None:
    """What ``semantic status`` says of this deployment's adapter (never its matrix)."""
    if model_id is None:
        return None
    row = conn.one(
        "SELECT examples, source, held_out, learned_at FROM learned_adapters WHERE model_id = ?", (model_id,)
    )
    if row is None:
        return None
    return {
        "examples": int(row[0]),
        "source": str(row[1]),
        "held_out": orjson.loads(row[2]),
        "learned_at": row[3],
    }
