"""Tool vectors: what text is embedded, where vectors are stored, and nearest-neighbour ranking.

Storage is sqlite-vec: ``tool_vectors_<dim>`` (vec0, keyed by tool id) beside
``tool_embeddings`` (model and hash of the embedded text per tool). A tool needs a vector when
it has no row for the configured model or its text hash changed; one whose exact text already
has a vector of that model (a re-imported toolkit's tools get new ids) takes a copy. So
re-imports and re-syncs embed only what changed, and a new model re-embeds everything.

Ranking does not use vec0's own KNN: its brute-force scan measured 17 ms at 10,000 tools and
190 ms at 100,000 on this machine, over the 10 ms / 30 ms budget for a whole search. Instead
each process keeps the vectors as one float32 matrix (loaded from vec0 once per change, which
``search_state.vectors_version`` signals) and ranks with one matrix-vector product (numpy),
masked to the toolkits the caller may see, so filtering never loses candidates.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from appliance.db.connection import SyncReader, WriteTx
from appliance.search.text import param_names, split_identifier

# Parameter names help (BFCL: +0.03 nDCG@10 dense alone, EMBEDDERS.md "dense-p"); this many at most.
MAX_PARAMS = 24


def document_text(group: str, toolkit: str, upstream_name: str, description: str, schema: Any) -> str:
    """``"<service> <split name>: <description> Parameters: a, b"`` (the bench's dense-p text).

    The service is ``group`` (OpenAPI tag, catalogue toolkit) or, when empty, the toolkit slug.
    Callers pass an empty group for a toolkit whose tools all share one (``uniform_group_toolkits``).
    """
    if isinstance(schema, str):
        try:
            schema = orjson.loads(schema)
        except orjson.JSONDecodeError:
            schema = {}
    kit = group or toolkit
    text = f"{kit} {split_identifier(upstream_name)}: {description.strip()}"
    params = list(dict.fromkeys(param_names(schema)))[:MAX_PARAMS]
    if params:
        text += " Parameters: " + ", ".join(params)
    return text


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()


@dataclass(frozen=True)
class Todo:
    tool_id: int
    text: str
    hash: str


def plan_in(conn: SyncReader, model_id: str) -> tuple[list[Todo], int]:
    """Active tools whose vector is missing, from another model, or of other text; and the total.

    Read in chunks: at 100,000 tools the rows with their input schemas are hundreds of MB as
    Python objects, and only the texts still to embed need keeping."""
    uniform = uniform_group_toolkits_in(conn)
    todo = []
    total = 0
    for rows in conn.chunks(
        "SELECT t.id, t.grp, k.slug, t.upstream_name, t.description, t.input_schema, e.model, e.text_hash,"
        " t.toolkit_id"
        " FROM tools t JOIN toolkits k ON k.id = t.toolkit_id"
        " LEFT JOIN tool_embeddings e ON e.tool_id = t.id"
        " WHERE t.state = 'active' ORDER BY t.id"
    ):
        total += len(rows)
        for r in rows:
            text = document_text("" if r[8] in uniform else r[1], r[2], r[3], r[4], r[5])
            digest = text_hash(text)
            if r[6] != model_id or r[7] != digest:
                todo.append(Todo(int(r[0]), text, digest))
    return todo, total


def uniform_group_toolkits_in(conn: SyncReader) -> set[int]:
    """Toolkits of several tools that all share one non-empty group (a catalogue's own label,
    an API's single tag). Such a group tells none of its tools apart, and put in front of every
    text it pulls their vectors together: the toolkit slug stands in for it (metatool's
    "chatgpt_plugins" on all 199 tools: semantic nDCG@10 +0.03 on the dev queries)."""
    rows = conn.all(
        "SELECT toolkit_id FROM tools WHERE state = 'active' GROUP BY toolkit_id"
        " HAVING count(*) > 1 AND count(DISTINCT grp) = 1 AND max(grp) != ''"
    )
    return {int(r[0]) for r in rows}


def reusable_in(conn: SyncReader, model_id: str, todo: Sequence[Todo]) -> dict[int, tuple[int, int]]:
    """For each todo whose exact text some other row already has a ``model_id`` vector of
    (a departed tool's, or a twin in another toolkit): todo tool id -> (source tool id, dim)."""
    out: dict[int, tuple[int, int]] = {}
    for start in range(0, len(todo), 500):
        chunk = todo[start : start + 500]
        marks = ",".join("?" * len(chunk))
        rows = conn.all(
            f"SELECT text_hash, tool_id, dim FROM tool_embeddings WHERE model = ? AND text_hash IN ({marks})",
            [model_id, *[t.hash for t in chunk]],
        )
        source = {str(r[0]): (int(r[1]), int(r[2])) for r in rows}
        for t in chunk:
            found = source.get(t.hash)
            if found is not None and found[0] != t.tool_id:
                out[t.tool_id] = found
    return out


async def copy(tx: WriteTx, model_id: str, pairs: Sequence[tuple[Todo, int, int]]) -> int:
    """Give each todo the vector of its (source tool id, dim); returns how many were copied."""
    copied = 0
    for todo, source, dim in pairs:
        table = _table(dim)
        row = await tx.one(f"SELECT embedding FROM {table} WHERE tool_id = ?", (source,))
        if row is None:
            continue  # swept meanwhile: the todo stays for embedding
        await _drop(tx, [todo.tool_id])
        await tx.run(f"INSERT INTO {table} (tool_id, embedding) VALUES (?, ?)", (todo.tool_id, row[0]))
        await tx.run(
            "INSERT OR REPLACE INTO tool_embeddings (tool_id, model, dim, text_hash) VALUES (?, ?, ?, ?)",
            (todo.tool_id, model_id, dim, todo.hash),
        )
        copied += 1
    if copied:
        await bump_version(tx)
    return copied


async def _drop(tx: WriteTx, ids: Sequence[int]) -> None:
    """Delete these tools' vectors, one statement per id: vec0 answers ``tool_id = ?`` by its
    primary key but scans the whole table for ``tool_id IN (...)`` (10 ms at 20,000 rows, per
    batch: the backfill's time grew with the square of the catalogue)."""
    marks = ",".join("?" * len(ids))
    for (old_dim,) in await tx.all(
        f"SELECT DISTINCT dim FROM tool_embeddings WHERE tool_id IN ({marks})", ids
    ):
        await tx.run_many(f"DELETE FROM {_table(old_dim)} WHERE tool_id = ?", [(i,) for i in ids])


def _table(dim: int) -> str:
    return f"tool_vectors_{int(dim)}"


async def store(tx: WriteTx, model_id: str, items: Sequence[tuple[Todo, np.ndarray]]) -> None:
    """Write one batch of vectors (and their bookkeeping) in the caller's transaction."""
    if not items:
        return
    dim = len(items[0][1])
    await tx.run(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {_table(dim)} USING vec0"
        f" (tool_id INTEGER PRIMARY KEY, embedding float[{dim}] distance_metric=cosine)"
    )
    # A tool deleted since it was planned gets no vector (its row would be swept anyway).
    marks = ",".join("?" * len(items))
    rows = await tx.all(f"SELECT id FROM tools WHERE id IN ({marks})", [t.tool_id for t, _ in items])
    live = {int(r[0]) for r in rows}
    items = [(t, v) for t, v in items if t.tool_id in live]
    if not items:
        return
    ids = [todo.tool_id for todo, _ in items]
    # Drop the old vector, whatever its dimension (an earlier provider's), then write the new.
    await _drop(tx, ids)
    await tx.run_many(f"DELETE FROM {_table(dim)} WHERE tool_id = ?", [(i,) for i in ids])
    await tx.run_many(
        f"INSERT INTO {_table(dim)} (tool_id, embedding) VALUES (?, ?)",
        [(todo.tool_id, np.asarray(vec, dtype=np.float32).tobytes()) for todo, vec in items],
    )
    await tx.run_many(
        "INSERT OR REPLACE INTO tool_embeddings (tool_id, model, dim, text_hash) VALUES (?, ?, ?, ?)",
        [(todo.tool_id, model_id, dim, todo.hash) for todo, _ in items],
    )
    await bump_version(tx)


async def bump_version(tx: WriteTx) -> None:
    await tx.run(
        "UPDATE search_state SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
        " WHERE key = 'vectors_version'"
    )


async def sweep(tx: WriteTx) -> int:
    """Drop the vectors of departed tools (after the backfill reused what it could)."""
    row = await tx.one("SELECT count(*) FROM tool_embeddings WHERE tool_id NOT IN (SELECT id FROM tools)")
    removed = int(row[0])
    if removed:
        await tx.run("DELETE FROM tool_embeddings WHERE tool_id NOT IN (SELECT id FROM tools)")
    for (name,) in await tx.all(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'tool_vectors_[0-9]*'"
        " AND name NOT GLOB 'tool_vectors_*_*'"
    ):
        orphans = f"FROM {name} WHERE tool_id NOT IN (SELECT tool_id FROM tool_embeddings)"
        row = await tx.one(f"SELECT count(*) {orphans}")
        if row[0]:
            await tx.run(f"DELETE {orphans}")
    if removed:
        await bump_version(tx)
    return removed


def unembedded_toolkits_in(conn: SyncReader, model_id: str) -> frozenset[int]:
    """Toolkits with an active tool that has no vector from ``model_id`` (memoised per data version)."""
    key = f"vectors_unembedded:{model_id}"
    cached = conn.memo.get(key)
    if cached is None:
        rows = conn.all(
            "SELECT DISTINCT t.toolkit_id FROM tools t"
            " LEFT JOIN tool_embeddings e ON e.tool_id = t.id AND e.model = ?"
            " WHERE t.state = 'active' AND e.tool_id IS NULL",
            (model_id,),
        )
        cached = frozenset(int(r[0]) for r in rows)
        conn.memo[key] = cached
    return frozenset(cached)


# Up to this many vectors, every search scores all of them exactly (~3 ms at 20,000 x 384).
# Beyond it, a binary sketch picks PREFILTER candidates by Hamming distance first and only
# those are scored exactly: the float32 scan of 100,000 x 384 reads 154 MB per search (tens of
# ms, more on a busy machine), the sketch 4.8 MB.
EXACT_MAX = 20_000
PREFILTER = 2_000
SKETCH_CHUNK = 8_192


@dataclass
class Matrix:
    version: str
    ids: np.ndarray  # int64 tool ids, ascending
    toolkits: np.ndarray  # int64 toolkit id of each row
    groups: np.ndarray  # int64 code of each row's (toolkit, group): the service it belongs to
    vectors: np.ndarray  # one normalised row per tool: float32, or int16 times ``scale``
    scale: np.ndarray | None = None  # float32 per row when ``vectors`` is int16 (above EXACT_MAX)
    center: np.ndarray | None = None  # mean vector; the sketch is the sign of (vector - center)
    sketch: np.ndarray | None = None  # uint64 packed sign bits, (words, tools) (large catalogues)
    kit_values: np.ndarray | None = None  # distinct toolkit ids (filled on the first masked search)
    kit_index: np.ndarray | None = None  # each row's position in ``kit_values``


def with_sketch(matrix: Matrix) -> Matrix:
    """Add the binary sketch (centred sign bits: MiniLM vectors share a large common component,
    so raw signs would be nearly equal for every tool)."""
    count = matrix.vectors.shape[0]
    total = np.zeros(matrix.vectors.shape[1], dtype=np.float64)
    for start in range(0, count, SKETCH_CHUNK):
        total += _rows(matrix, slice(start, start + SKETCH_CHUNK)).sum(axis=0, dtype=np.float64)
    center = (total / max(1, count)).astype(np.float32)
    matrix.center = center
    words = (matrix.vectors.shape[1] + 63) // 64
    sketch = np.empty((words, count), dtype=np.uint64)
    for start in range(0, count, SKETCH_CHUNK):  # the sign bits of 100,000 rows at once: 38 MB
        part = _rows(matrix, slice(start, start + SKETCH_CHUNK))
        sketch[:, start : start + part.shape[0]] = _sign_words(part > center).T
    matrix.sketch = sketch
    return matrix


def _rows(matrix: Matrix, which: slice | np.ndarray) -> np.ndarray:
    """These rows as float32 (scaled back from int16 in a large catalogue's matrix)."""
    rows = matrix.vectors[which]
    if matrix.scale is None:
        return rows
    out: np.ndarray = rows.astype(np.float32) * matrix.scale[which, None]
    return out


def _quantised(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row as int16 times a float32 scale (its largest magnitude / 32767)."""
    scale = np.maximum(np.abs(rows).max(axis=1), 1e-12) / 32767.0
    return np.rint(rows / scale[:, None]).astype(np.int16), scale.astype(np.float32)


def _sign_words(bits: np.ndarray) -> np.ndarray:
    """Sign bits packed into 64-bit words, one row per vector (six words at 384 dimensions)."""
    packed = np.packbits(np.atleast_2d(bits), axis=1)
    pad = (-packed.shape[1]) % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


def _hamming(sketch: np.ndarray, words: np.ndarray) -> np.ndarray:
    """Hamming distance of every row to ``words``, as int32. The sketch is stored word-major
    (one contiguous array per word) and summed word by word into one buffer: at 100,000 rows
    0.6 ms, where XOR-ing the row-major array and summing along its rows took 3 ms (numpy sums
    a short inner axis slowly). uint16: at most 64 bits a word, a few words."""
    count = sketch.shape[1]
    acc = np.zeros(count, dtype=np.uint16)
    xor = np.empty(count, dtype=np.uint64)
    ones = np.empty(count, dtype=np.uint8)
    for j in range(sketch.shape[0]):
        np.bitwise_xor(sketch[j], words[j], out=xor)
        np.bitwise_count(xor, out=ones)
        acc += ones
    return acc


def _closest(distance: np.ndarray, wanted: int) -> np.ndarray:
    """The rows of the ``wanted`` smallest distances (ties: the first rows). Distances are small
    (at most the sketch's bits), so one count per distance finds the cut: 0.16 ms at 100,000
    rows, where ``argpartition`` took 0.84 ms."""
    reached = np.cumsum(np.bincount(distance))
    cut = int(np.searchsorted(reached, wanted))  # the distance at which ``wanted`` rows are in
    below = np.flatnonzero(distance < cut)
    at = np.flatnonzero(distance == cut)[: wanted - below.shape[0]]
    return np.concatenate((below, at))


def _allowed_rows(matrix: Matrix, toolkit_ids: Collection[int] | None) -> np.ndarray | None:
    """Which rows ``toolkit_ids`` may see, or None when it sees every row (no mask to apply).

    Decided per distinct toolkit, then spread to the rows by each row's toolkit index, instead
    of an ``isin`` over every row (3 ms at 100,000 rows)."""
    if toolkit_ids is None:
        return None
    if matrix.kit_index is None or matrix.kit_values is None:
        matrix.kit_values, matrix.kit_index = np.unique(matrix.toolkits, return_inverse=True)
    wanted = np.isin(matrix.kit_values, np.fromiter(toolkit_ids, dtype=np.int64))
    if wanted.all():
        return None
    result: np.ndarray = wanted[matrix.kit_index]
    return result


_CACHE: dict[tuple[str, str], Matrix] = {}
_LOCK = threading.Lock()


def _state(conn: SyncReader, key: str) -> str:
    row = conn.one("SELECT value FROM search_state WHERE key = ?", (key,))
    return "" if row is None else str(row[0])


def matrix_in(conn: SyncReader, model_id: str) -> Matrix | None:
    """This process's matrix of ``model_id`` vectors, reloaded when the vectors changed."""
    version = _state(conn, "vectors_version")
    key = (_state(conn, "store_id"), model_id)
    with _LOCK:
        cached = _CACHE.get(key)
        if cached is not None and cached.version == version:
            return cached
    row = conn.one("SELECT dim, count(*) FROM tool_embeddings WHERE model = ?", (model_id,))
    if row is None or row[0] is None:
        return None
    dim, expected = int(row[0]), int(row[1])
    built = _load(conn, model_id, dim, expected, version)
    with _LOCK:
        _CACHE[key] = built
    return built


def _load(conn: SyncReader, model_id: str, dim: int, expected: int, version: str) -> Matrix:
    """Read the vectors chunk by chunk into arrays allocated once (no list of 100,000 rows, no
    joined copy of every blob). Above ``EXACT_MAX`` rows each vector is kept as int16 with a
    scale of its own: only the sketch's candidates are scored, converted back first (0.2 ms for
    2,000 rows; float16 took 1.5 ms to convert), and 100,000 x 384 takes 77 MB instead of 154 MB.
    Cosines stay within 1e-5 of float32's (the exact top 10 unchanged on clustered test data,
    where int8 changed 5 % of it)."""
    wide = expected <= EXACT_MAX
    ids = np.empty(expected, dtype=np.int64)
    kits = np.empty(expected, dtype=np.int64)
    groups = np.empty(expected, dtype=np.int64)
    matrix = np.empty((expected, dim), dtype=np.float32 if wide else np.int16)
    scale = None if wide else np.empty(expected, dtype=np.float32)
    codes: dict[tuple[int, str], int] = {}
    n = 0
    for rows in conn.chunks(
        f"SELECT v.tool_id, t.toolkit_id, v.embedding, t.grp FROM {_table(dim)} v"
        " JOIN tool_embeddings e ON e.tool_id = v.tool_id AND e.model = ?"
        " JOIN tools t ON t.id = v.tool_id ORDER BY v.tool_id",
        (model_id,),
    ):
        rows = rows[: expected - n]  # a row written since the count waits for the next load
        end = n + len(rows)
        ids[n:end] = [r[0] for r in rows]
        kits[n:end] = [r[1] for r in rows]
        groups[n:end] = [codes.setdefault((r[1], r[3]), len(codes)) for r in rows]
        block = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32).reshape(-1, dim)
        if scale is None:
            matrix[n:end] = block
        else:
            matrix[n:end], scale[n:end] = _quantised(block)
        n = end
    built = Matrix(version, ids[:n], kits[:n], groups[:n], matrix[:n], None if scale is None else scale[:n])
    if n > EXACT_MAX:
        with_sketch(built)
    return built


def _dot(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Each row's dot product with ``query``, in this thread.

    Not ``rows @ query``: that goes to OpenBLAS, which runs a matrix this size on every core and
    whose threads then spin waiting for more work. Measured at 10,000 x 384: 25 ms of CPU per
    search across all threads (13 ms with one BLAS thread), and 5.8 ms wall when its threads had
    gone to sleep since the last search. ``einsum`` uses numpy's own single-threaded SIMD loop:
    1.0 ms with the matrix out of cache, against 0.8 ms for one-thread BLAS, and it needs no
    process-wide BLAS setting (which child processes would inherit through the environment).
    """
    scores: np.ndarray = np.einsum("ij,j->i", rows, query)
    return scores


def nearest(
    matrix: Matrix, query: np.ndarray, *, k: int, toolkit_ids: Collection[int] | None = None
) -> list[tuple[int, float]]:
    """The ``k`` most similar tools as (tool id, cosine), best first, within ``toolkit_ids``."""
    if matrix.vectors.shape[0] == 0 or k <= 0 or query.shape[0] != matrix.vectors.shape[1]:
        return []
    query = query.astype(np.float32)
    allowed = _allowed_rows(matrix, toolkit_ids)
    rows: np.ndarray | None = None
    if matrix.sketch is not None and matrix.center is not None:
        distance = _hamming(matrix.sketch, _sign_words(query > matrix.center)[0])
        if allowed is not None:
            distance[~allowed] = matrix.sketch.shape[0] * 64 + 1  # past any real distance
        rows = _closest(distance, min(max(PREFILTER, k), distance.shape[0]))
        scores = _dot(_rows(matrix, rows), query)
        if allowed is not None:
            scores[~allowed[rows]] = -np.inf
    else:
        scores = _dot(_rows(matrix, slice(None)), query)
        if allowed is not None:
            scores[~allowed] = -np.inf
    k = min(k, scores.shape[0])
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top], kind="stable")]
    index = top if rows is None else rows[top]
    return [(int(matrix.ids[i]), float(s)) for i, s in zip(index, scores[top], strict=True) if np.isfinite(s)]


def among(matrix: Matrix, tool_ids: Collection[int], query: np.ndarray, *, k: int) -> list[tuple[int, float]]:
    """The ``k`` of ``tool_ids`` (those with a vector) most similar to ``query``, as (tool id,
    cosine), best first: exact, for a few hundred candidates. A request's asks rank only what the
    request and the ask's own words found (docs/search.md, "Asks"): that scored as well as a
    search of the whole catalogue per ask, which costs 3.3 ms at 100,000 tools."""
    if not tool_ids or k <= 0 or matrix.ids.shape[0] == 0 or query.shape[0] != matrix.vectors.shape[1]:
        return []
    wanted = np.unique(np.fromiter(tool_ids, dtype=np.int64, count=len(tool_ids)))
    pos = np.minimum(np.searchsorted(matrix.ids, wanted), matrix.ids.shape[0] - 1)
    rows = pos[matrix.ids[pos] == wanted]
    if rows.shape[0] == 0:
        return []
    scores = _dot(_rows(matrix, rows), query.astype(np.float32))
    top = np.argsort(-scores, kind="stable")[:k]
    return [(int(matrix.ids[rows[i]]), float(scores[i])) for i in top]


def ask_lists(
    matrix: Matrix,
    request: Sequence[Sequence[tuple[int, float]]],
    words: Sequence[Sequence[tuple[int, float]]],
    meanings: Sequence[np.ndarray | None],
    *,
    k: int,
) -> list[tuple[Sequence[tuple[int, float]], list[tuple[int, float]]]]:
    """Each ask's two lists for ``hybrid.rank``: its own words' list (``words``) and, by
    meaning, its vector's ``among`` over what the request's lists found and what its words
    found. An ask without a vector (past the model's cut) is left out."""
    found = {t for hits in request for t, _ in hits}
    return [
        (said, among(matrix, found | {t for t, _ in said}, vector, k=k))
        for said, vector in zip(words, meanings, strict=True)
        if vector is not None
    ]


def groups_of(matrix: Matrix, tool_ids: Sequence[int]) -> dict[int, int]:
    """The service (toolkit + group: OpenAPI tag, catalogue toolkit) of each of ``tool_ids``
    that has a vector, as an opaque code (the matrix keeps ids sorted)."""
    if not tool_ids or matrix.ids.shape[0] == 0:
        return {}
    wanted = np.asarray(tool_ids, dtype=np.int64)
    pos = np.minimum(np.searchsorted(matrix.ids, wanted), matrix.ids.shape[0] - 1)
    found = matrix.ids[pos] == wanted
    return {int(t): int(k) for t, k, ok in zip(wanted, matrix.groups[pos], found, strict=True) if ok}


def semantic_switch_in(conn: SyncReader) -> bool:
    """The run-time kill switch (``search_state.semantic``); on unless set to 'off'."""
    return _state(conn, "semantic") != "off"


def semantic_switch_setting_in(conn: SyncReader) -> str | None:
    """What the kill switch was set to, or None if never: then the setting decides."""
    row = conn.one("SELECT value FROM search_state WHERE key = 'semantic'")
    return None if row is None else str(row[0])


def semantic_on_in(conn: SyncReader, setting_on: bool) -> bool:
    """Whether the semantic pass is on: the kill switch where it was ever set, else the setting."""
    switch = semantic_switch_setting_in(conn)
    return setting_on if switch is None else switch != "off"


async def set_semantic_switch(tx: WriteTx, on: bool) -> None:
    await tx.run(
        "INSERT INTO search_state (key, value) VALUES ('semantic', ?)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        ("on" if on else "off",),
    )


def coverage_in(conn: SyncReader, model_id: str) -> tuple[int, int]:
    """(active tools with a ``model_id`` vector, active tools)."""
    row = conn.one(
        "SELECT count(e.tool_id), count(*) FROM tools t"
        " LEFT JOIN tool_embeddings e ON e.tool_id = t.id AND e.model = ? WHERE t.state = 'active'",
        (model_id,),
    )
    return int(row[0]), int(row[1])
