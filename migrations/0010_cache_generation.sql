-- A counter of changes that remembered lookups depend on (see appliance/db/generation.py).
-- Bump triggers on every ordinary table are installed by the appliance after migrations;
-- tables named in cache_exempt get none: they are append-only call records that no
-- remembered lookup reads, and bumping on them would forget everything after each call.
CREATE TABLE cache_generation (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n INTEGER NOT NULL
);
INSERT INTO cache_generation (id, n) VALUES (1, 0);

CREATE TABLE cache_exempt (
    name TEXT PRIMARY KEY
) WITHOUT ROWID;
INSERT INTO cache_exempt (name) VALUES
    ('audit_log'),
    ('ledger_entries'),
    ('import_events'),
    ('idempotency_keys'),
    ('cache_generation'),
    ('cache_exempt'),
    ('schema_migrations');
