"""The vectors of a Lore toolkit's passages (migration 0016): what needs one, storing them, and
the passages nearest a query's vector.

A chunk's text for embedding is its heading path and the start of its body (``TEXT_CHARS``:
the bundled model reads 256 word pieces, about a thousand characters, and cuts the rest).
Vectors arrive as float32 bytes; the gateway's backfill makes them and its search asks
``nearest_in`` for one toolkit at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from appliance.db import Reader, WriteTx

TEXT_CHARS = 1_200


@dataclass(frozen=True)
class Todo:
    chunk_id: int
    toolkit_id: int
    text: str


def todo_in(conn: Reader, model_id: str, *, limit: int) -> list[Todo]:
    """Up to ``limit`` chunks with no vector of ``model_id`` (a model change re-embeds all)."""
    rows = conn.all(
        "SELECT c.id, c.toolkit_id, c.heading, substr(d.body, c.start + 1, min(c.length, ?)) AS text"
        " FROM lore_chunks c JOIN lore_documents d ON d.id = c.document_id"
        " LEFT JOIN lore_embeddings e ON e.chunk_id = c.id AND e.model = ?"
        " WHERE e.chunk_id IS NULL ORDER BY c.id LIMIT ?",
        (TEXT_CHARS, model_id, limit),
    )
    return [Todo(int(r[0]), int(r[1]), f"{r[2]}\n{r[3]}" if r[2] else str(r[3])) for r in rows]


def any_in(conn: Reader, toolkit_id: int, model_id: str) -> bool:
    """Whether the toolkit has a passage with a vector of ``model_id`` (worth embedding a query)."""
    row = conn.one(
        "SELECT EXISTS (SELECT 1 FROM lore_embeddings WHERE toolkit_id = ? AND model = ?)",
        (toolkit_id, model_id),
    )
    return bool(row[0])


def missing_in(conn: Reader, model_id: str) -> bool:
    """Whether any chunk lacks a vector of ``model_id``."""
    row = conn.one(
        "SELECT EXISTS (SELECT 1 FROM lore_chunks c LEFT JOIN lore_embeddings e"
        " ON e.chunk_id = c.id AND e.model = ? WHERE e.chunk_id IS NULL)",
        (model_id,),
    )
    return bool(row[0])


async def store(tx: WriteTx, model_id: str, rows: Sequence[tuple[Todo, bytes]]) -> None:
    """Write each chunk's vector (float32 bytes), replacing another model's. A chunk removed
    since it was planned is skipped: its vector would have no passage."""
    await tx.run_many(
        "INSERT OR REPLACE INTO lore_embeddings (chunk_id, toolkit_id, model, dim, vector)"
        " SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM lore_chunks WHERE id = ?)",
        [(t.chunk_id, t.toolkit_id, model_id, len(v) // 4, v, t.chunk_id) for t, v in rows],
    )


def nearest_in(
    conn: Reader, toolkit_id: int, model_id: str, vector: bytes, *, limit: int
) -> list[tuple[int, float]]:
    """The toolkit's ``limit`` chunks nearest ``vector``, best first, as (chunk id, cosine)."""
    rows = conn.all(
        "SELECT chunk_id, 1.0 - vec_distance_cosine(vector, ?) AS cosine FROM lore_embeddings"
        " WHERE toolkit_id = ? AND model = ? AND dim = ? ORDER BY cosine DESC LIMIT ?",
        (vector, toolkit_id, model_id, len(vector) // 4, limit),
    )
    return [(int(r[0]), float(r[1])) for r in rows]


def embedded_in(conn: Reader, toolkit_id: int, model_id: str) -> tuple[int, int]:
    """(chunks with a vector of ``model_id``, chunks) of one toolkit."""
    row = conn.one(
        "SELECT (SELECT count(*) FROM lore_embeddings WHERE toolkit_id = ? AND model = ?),"
        " (SELECT count(*) FROM lore_chunks WHERE toolkit_id = ?)",
        (toolkit_id, model_id, toolkit_id),
    )
    return int(row[0]), int(row[1])
