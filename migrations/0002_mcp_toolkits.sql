-- MCP upstreams: how to reach a toolkit, its health, and tool states for re-sync approval.

-- JSON: {"transport": "http"|"sse"|"stdio", "url", "command", "args", "env", "timeout_s", ...}.
-- Secrets never live here (the vault holds them); this column is safe to show an owner.
ALTER TABLE toolkits ADD COLUMN connection TEXT;
ALTER TABLE toolkits ADD COLUMN health TEXT NOT NULL DEFAULT 'active'
    CHECK (health IN ('active', 'degraded', 'broken', 'starting'));
ALTER TABLE toolkits ADD COLUMN health_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE toolkits ADD COLUMN health_changed_at TEXT;

-- active: searchable and callable; pending: new or changed upstream, awaiting approval;
-- disabled: gone upstream (kept, so an approval history and names survive a flap).
ALTER TABLE tools ADD COLUMN state TEXT NOT NULL DEFAULT 'active'
    CHECK (state IN ('active', 'pending', 'disabled'));
-- Hash of what an approval covers (description + input schema + annotations).
ALTER TABLE tools ADD COLUMN fingerprint TEXT NOT NULL DEFAULT '';
-- An owner's reclassification wins over the kind derived from the source.
ALTER TABLE tools ADD COLUMN kind_override TEXT
    CHECK (kind_override IS NULL OR kind_override IN ('read', 'write', 'destructive'));
CREATE INDEX tools_by_state ON tools (toolkit_id, state);
