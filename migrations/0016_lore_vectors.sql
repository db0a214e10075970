-- Semantic search over Lore passages (issue 23): one embedding per chunk, with the model that
-- made it. A plain table rather than a vec0 index: a search ranks one toolkit's chunks only,
-- by sqlite-vec's vec_distance_cosine over that toolkit's rows (brute force in C, no
-- in-memory matrix), and a chunk's vector goes with the chunk (re-import, document or
-- toolkit removed) through the foreign key.
CREATE TABLE lore_embeddings (
    chunk_id    INTEGER PRIMARY KEY REFERENCES lore_chunks(id) ON DELETE CASCADE,
    toolkit_id  INTEGER NOT NULL,
    model       TEXT NOT NULL,
    dim         INTEGER NOT NULL CHECK (dim > 0),
    vector      BLOB NOT NULL                 -- dim float32 values, little-endian
);
CREATE INDEX lore_embeddings_by_toolkit ON lore_embeddings (toolkit_id, model);

-- As for the chunks: nothing remembered is read from it, and a backfill writes many rows.
INSERT INTO cache_exempt (name) VALUES ('lore_embeddings');
