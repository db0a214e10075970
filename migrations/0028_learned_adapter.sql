-- A query adapter learned on this deployment (issue 22, `toolspoke learn`; search/adapter.py):
-- one per embedding model, replacing the shipped adapter for that model's searches. Learned
-- from labelled requests or from the usage log's searches that led to a call; it holds a
-- matrix, never the requests it was learned from.
CREATE TABLE learned_adapters (
    model_id   TEXT PRIMARY KEY,
    dim        INTEGER NOT NULL CHECK (dim > 0),
    matrix     BLOB NOT NULL,                -- float32, dim x dim, row-major
    examples   INTEGER NOT NULL,             -- requests it was learned from
    source     TEXT NOT NULL CHECK (source IN ('queries', 'usage')),
    held_out   TEXT NOT NULL,                -- JSON: the held-out check made when it was learned
    learned_at REAL NOT NULL
);
