"""A Lore toolkit's documents, chunks and chunk index in SQLite (migration 0015).

Writes run inside the caller's transaction (the import's, with the toolkit's own row), in
a handful of statements whatever the number of documents: ids are handed out here while
the transaction holds the write lock, so rows go in with ``executemany`` rather than one
thread hop each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from appliance.db import ReadConn, Reader, WriteTx

if TYPE_CHECKING:  # a call's path (gateway/lore_tools.py) reads the store, never the parsers
    from appliance.lore.formats import Document

# bm25 weights of (heading, body): a heading's words count double.
_RANK = "bm25(lore_fts, 2.0, 1.0)"
SNIPPET_OPEN, SNIPPET_CLOSE = "«", "»"
# A snippet's 32 tokens; for a passage found by meaning alone, its opening words instead (read
# from at most _OPENING characters of it).
_OPENING_WORDS, _OPENING = 32, 400


@dataclass(frozen=True)
class Stored:
    """A document to store: what was parsed, and the fingerprint of the file it came from."""

    document: Document
    sha256: str
    size: int


async def fingerprints(conn: ReadConn, toolkit_id: int) -> dict[str, tuple[int, str]]:
    """Each stored document's path → (id, sha256)."""
    rows = await conn.all("SELECT id, path, sha256 FROM lore_documents WHERE toolkit_id = ?", (toolkit_id,))
    return {str(r["path"]): (int(r["id"]), str(r["sha256"])) for r in rows}


@dataclass(frozen=True)
class Plan:
    """What storing ``docs`` over the stored documents does, by path."""

    added: list[Stored]
    changed: list[Stored]
    removed: list[str]
    unchanged: list[str]

    def as_dict(self) -> dict[str, list[str]]:
        return {
            "added": sorted(d.document.path for d in self.added),
            "changed": sorted(d.document.path for d in self.changed),
            "removed": self.removed,
            "unchanged": self.unchanged,
        }


def plan(known: dict[str, tuple[int, str]], docs: Sequence[Stored]) -> Plan:
    """New paths are added, a path whose file's hash moved is changed, absent paths removed."""
    wanted = {d.document.path for d in docs}
    changed = [d for d in docs if d.document.path in known and known[d.document.path][1] != d.sha256]
    moved = {d.document.path for d in changed}
    return Plan(
        added=[d for d in docs if d.document.path not in known],
        changed=changed,
        removed=sorted(p for p in known if p not in wanted),
        unchanged=sorted(p for p in wanted if p in known and p not in moved),
    )


async def sync_documents(tx: WriteTx, toolkit_id: int, docs: Sequence[Stored]) -> Plan:
    """Make the toolkit's documents exactly ``docs`` (see ``plan``); a changed document keeps
    its id and is re-indexed, an unchanged one is not touched."""
    known = await fingerprints(tx, toolkit_id)
    todo = plan(known, docs)
    stale = [known[p][0] for p in todo.removed] + [known[d.document.path][0] for d in todo.changed]
    if stale:
        # Chunks first: their delete trigger takes them out of the index (migration 0015).
        ids = orjson.dumps(stale).decode()
        await tx.run("DELETE FROM lore_chunks WHERE document_id IN (SELECT value FROM json_each(?))", (ids,))
        gone = orjson.dumps([known[p][0] for p in todo.removed]).decode()
        await tx.run("DELETE FROM lore_documents WHERE id IN (SELECT value FROM json_each(?))", (gone,))
    if todo.changed:
        await tx.run_many(
            "UPDATE lore_documents SET title = ?, format = ?, sha256 = ?, size = ?, body = ?,"
            " updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?",
            [(*_doc_fields(d), known[d.document.path][0]) for d in todo.changed],
        )
    first = await _next_id(tx, "lore_documents")
    added = [(first + i, d) for i, d in enumerate(todo.added)]
    if added:
        await tx.run_many(
            "INSERT INTO lore_documents (id, toolkit_id, title, format, sha256, size, body, path)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(doc_id, toolkit_id, *_doc_fields(d), d.document.path) for doc_id, d in added],
        )
    await _index(tx, toolkit_id, [(known[d.document.path][0], d) for d in todo.changed] + added)
    return todo


def _doc_fields(d: Stored) -> tuple[Any, ...]:
    doc = d.document
    return (doc.title, doc.format, d.sha256, d.size, doc.body)


async def _next_id(tx: WriteTx, table: str) -> int:
    row = await tx.one(f"SELECT coalesce(max(id), 0) + 1 AS n FROM {table}")
    return int(row["n"])


async def _index(tx: WriteTx, toolkit_id: int, placed: list[tuple[int, Stored]]) -> None:
    first = await _next_id(tx, "lore_chunks")
    chunks: list[tuple[Any, ...]] = []
    entries: list[tuple[Any, ...]] = []
    for doc_id, stored in placed:
        body = stored.document.body
        for c in stored.document.chunks:
            chunk_id = first + len(chunks)
            chunks.append((chunk_id, doc_id, toolkit_id, c.heading, c.start, c.length))
            entries.append((chunk_id, c.heading, body[c.start : c.start + c.length]))
    if chunks:
        await tx.run_many(
            "INSERT INTO lore_chunks (id, document_id, toolkit_id, heading, start, length)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            chunks,
        )
        await tx.run_many("INSERT INTO lore_fts (rowid, heading, body) VALUES (?, ?, ?)", entries)


async def optimize(tx: WriteTx) -> None:
    """Merge the index's segments after a bulk write (queries read fewer b-trees)."""
    await tx.run("INSERT INTO lore_fts (lore_fts) VALUES ('optimize')")


def search_in(conn: Reader, toolkit_id: int, match: str, *, limit: int) -> list[dict[str, Any]]:
    """The best chunks of one toolkit for an FTS5 ``match`` expression (already made safe)."""
    return passages_in(conn, ranked_in(conn, toolkit_id, match, limit=limit), match)


def ranked_in(conn: Reader, toolkit_id: int, match: str, *, limit: int) -> list[tuple[int, float]]:
    """The ids of one toolkit's best chunks for ``match``, best first, with their BM25 score
    (higher is better).

    The ranking alone: snippets and documents are fetched for the few rows kept
    (``passages_in``); computed here, a snippet was made for every matching chunk before the
    sort. (A toolkit token ANDed into the MATCH cost more than the filter below: FTS5 walked
    the toolkit's whole doclist for every query, 4 ms at 12,000 chunks.)
    """
    ranked = conn.all(
        f"SELECT lore_fts.rowid AS id, {_RANK} AS rank"
        # CROSS JOIN: the index drives, each match looks up its chunk by id (never the reverse)
        " FROM lore_fts CROSS JOIN lore_chunks c ON c.id = lore_fts.rowid"
        " WHERE lore_fts MATCH ? AND c.toolkit_id = ? ORDER BY rank LIMIT ?",
        (match, toolkit_id, limit),
    )
    return [(int(r["id"]), -float(r["rank"])) for r in ranked]


def passages_in(conn: Reader, scored: Sequence[tuple[int, float]], match: str | None) -> list[dict[str, Any]]:
    """The passages of ``scored`` chunks (id, score), in that order: document, heading,
    position and a snippet (the words of ``match`` marked; a chunk found by meaning alone, or
    with no ``match``, shows its opening words)."""
    if not scored:
        return []
    ids = orjson.dumps([chunk_id for chunk_id, _ in scored]).decode()
    quoted: dict[int, str] = {}
    if match is not None:
        snippets = conn.all(
            f"SELECT rowid AS id, snippet(lore_fts, 1, '{SNIPPET_OPEN}', '{SNIPPET_CLOSE}', '…', 32)"
            " AS snippet FROM lore_fts WHERE lore_fts MATCH ? AND rowid IN (SELECT value FROM json_each(?))",
            (match, ids),
        )
        quoted = {int(s["id"]): s["snippet"] for s in snippets}
    rows = conn.all(
        "SELECT c.id, c.document_id, d.path, d.title, c.heading, c.start, c.length,"
        f" substr(d.body, c.start + 1, min(c.length, {_OPENING})) AS opening FROM lore_chunks c"
        " JOIN lore_documents d ON d.id = c.document_id WHERE c.id IN (SELECT value FROM json_each(?))",
        (ids,),
    )
    found = {int(r["id"]): r for r in rows}
    return [
        {
            "document_id": int(r["document_id"]),
            "path": r["path"],
            "title": r["title"],
            "heading": r["heading"],
            "offset": int(r["start"]),
            "length": int(r["length"]),
            "snippet": quoted.get(chunk_id) or _opening(r["opening"]),
            "score": round(score, 4),
        }
        for chunk_id, score in scored
        if (r := found.get(chunk_id)) is not None
    ]


def _opening(text: str) -> str:
    """A chunk's first words, as long as a snippet, cut at a word."""
    words = text.split()
    shown = " ".join(words[:_OPENING_WORDS])
    return shown + ("…" if len(words) > _OPENING_WORDS else "")


async def list_documents(
    conn: ReadConn, toolkit_id: int, *, offset: int, limit: int
) -> tuple[list[dict[str, Any]], int]:
    """A page of the toolkit's documents by path, and how many it has."""
    total = await conn.one("SELECT count(*) AS n FROM lore_documents WHERE toolkit_id = ?", (toolkit_id,))
    rows = await conn.all(
        "SELECT id, path, title, format, size, length(body) AS chars, updated_at FROM lore_documents"
        " WHERE toolkit_id = ? ORDER BY path LIMIT ? OFFSET ?",
        (toolkit_id, limit, offset),
    )
    docs = [
        {
            "id": int(r["id"]),
            "path": r["path"],
            "title": r["title"],
            "format": r["format"],
            "bytes": int(r["size"]),
            "characters": int(r["chars"]),
            "updated_at": r["updated_at"],
        }
        for r in rows
    ]
    return docs, int(total["n"])


async def read_range(
    conn: ReadConn, toolkit_id: int, document_id: int, offset: int, length: int
) -> dict[str, Any] | None:
    """``length`` characters of a document's text from ``offset``; None when the toolkit has
    no such document."""
    row = await conn.one(
        "SELECT id, path, title, length(body) AS chars, substr(body, ? + 1, ?) AS text FROM lore_documents"
        " WHERE id = ? AND toolkit_id = ?",
        (offset, length, document_id, toolkit_id),
    )
    if row is None:
        return None
    return {
        "id": int(row["id"]),
        "path": row["path"],
        "title": row["title"],
        "characters": int(row["chars"]),
        "text": row["text"],
    }


async def index_size(conn: ReadConn, toolkit_id: int) -> dict[str, int]:
    """Documents, chunks and text characters of one toolkit (the import report, the bench)."""
    row = await conn.one(
        "SELECT (SELECT count(*) FROM lore_documents WHERE toolkit_id = ?) AS documents,"
        " (SELECT count(*) FROM lore_chunks WHERE toolkit_id = ?) AS chunks,"
        " (SELECT coalesce(sum(length(body)), 0) FROM lore_documents WHERE toolkit_id = ?) AS characters",
        (toolkit_id, toolkit_id, toolkit_id),
    )
    return {k: int(row[k]) for k in ("documents", "chunks", "characters")}
