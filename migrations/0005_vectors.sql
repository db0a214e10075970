-- Semantic search: one embedding per tool, with the model that made it and a hash of the text
-- it was made from, so that only changed tools are re-embedded and a model change re-embeds all.
-- The vectors live in sqlite-vec vec0 tables, one per dimension (`tool_vectors_<dim>`); the
-- bundled local model's 384-dimension table is created here, other providers' tables by
-- search/vectors.py when their first vectors arrive.

-- No foreign key on purpose: when a re-import replaces a toolkit, its tools get new ids, and a
-- new tool whose text hash matches a departed one takes that vector instead of being embedded
-- again. The backfill sweeps rows of departed tools once it has reused what it could.
CREATE TABLE tool_embeddings (
    tool_id     INTEGER PRIMARY KEY,
    model       TEXT NOT NULL,
    dim         INTEGER NOT NULL CHECK (dim > 0),
    text_hash   TEXT NOT NULL,
    embedded_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX tool_embeddings_by_text ON tool_embeddings (model, text_hash);

CREATE VIRTUAL TABLE tool_vectors_384 USING vec0 (
    tool_id INTEGER PRIMARY KEY,
    embedding float[384] distance_metric=cosine
);

-- Run-time search switches and counters that every process (server, CLI) must agree on.
-- `semantic` ('on'/'off') is the kill switch; `vectors_version` moves on every vector write so
-- readers know when to reload their in-memory matrix.
CREATE TABLE search_state (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO search_state (key, value) VALUES ('vectors_version', '0');
-- Tells this database's vectors from another's in a process's matrix cache.
INSERT INTO search_state (key, value) VALUES ('store_id', lower(hex(randomblob(8))));
