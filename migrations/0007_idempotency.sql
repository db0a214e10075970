-- Idempotency keys on tools/call (RELIABILITY LEDGER-05): one execution per key, its first
-- result replayed to every retry. Keys belong to the caller: an agent's keys are its own, a
-- user's own keys (no agent) are the user's, so another caller reusing a key is another key.

CREATE TABLE idempotency_keys (
    scope        TEXT NOT NULL,                -- 'agent:<id>', 'user:<id>' or 'operator'
    key          TEXT NOT NULL,                -- as the client sent it
    request_hash TEXT NOT NULL,                -- sha256 of the call (target, tool name, arguments)
    state        TEXT NOT NULL CHECK (state IN ('running', 'done')),
    result       TEXT,                         -- the stored CallResult (JSON) once done
    created_at   REAL NOT NULL,                -- unix seconds; pruned after the retention
    PRIMARY KEY (scope, key)
) WITHOUT ROWID;
CREATE INDEX idempotency_by_age ON idempotency_keys (created_at);
