-- Recent health of each toolkit (issue 18): the toolkit row holds only its state now; this
-- keeps its last transitions (state, reason, when), bounded per toolkit by the writer
-- (catalogue/store.set_toolkit_health keeps HEALTH_HISTORY rows), gone with the toolkit.
CREATE TABLE toolkit_health_history (
    id          INTEGER PRIMARY KEY,
    toolkit_id  INTEGER NOT NULL REFERENCES toolkits(id) ON DELETE CASCADE,
    health      TEXT NOT NULL CHECK (health IN ('active', 'degraded', 'broken', 'starting')),
    reason      TEXT NOT NULL DEFAULT '',
    at          TEXT NOT NULL                  -- RFC 3339, UTC, as toolkits.health_changed_at
);
CREATE INDEX toolkit_health_history_by_toolkit ON toolkit_health_history (toolkit_id, id);
