-- Who may see and call what (issue 4): agents, key owners, toolkit ownership and visibility,
-- grants, per-toolkit tool allow-lists, preloading and import accounting.
-- The rules these tables encode live in appliance/access/visibility.py (one place).

-- An agent acts for exactly one user; its keys reach at most what that user can reach.
CREATE TABLE agents (
    id          INTEGER PRIMARY KEY,
    user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    preload     TEXT NOT NULL DEFAULT '[]',    -- JSON list of tool names its sessions list directly
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (user_id, name)
);

-- A key acts for its user, or (agent_id set) for one of that user's agents.
ALTER TABLE api_keys ADD COLUMN agent_id INTEGER REFERENCES agents(id) ON DELETE CASCADE;
-- JSON list of tool names this key's sessions list directly; NULL: its agent's list.
ALTER TABLE api_keys ADD COLUMN preload TEXT;
CREATE INDEX api_keys_by_user ON api_keys (user_id);
CREATE INDEX api_keys_by_agent ON api_keys (agent_id);

-- Owner: the user who imported it. NULL means the platform's: every admin owns it.
ALTER TABLE toolkits ADD COLUMN owner_id INTEGER REFERENCES users(id) ON DELETE SET NULL;
ALTER TABLE toolkits ADD COLUMN visibility TEXT NOT NULL DEFAULT 'private'
    CHECK (visibility IN ('private', 'published'));
-- A platform default reaches every agent without a grant (an admin sets it).
ALTER TABLE toolkits ADD COLUMN is_default INTEGER NOT NULL DEFAULT 0 CHECK (is_default IN (0, 1));
-- Toolkits that existed before owners did belong to the first admin, when there is one.
UPDATE toolkits SET owner_id = (SELECT min(id) FROM users WHERE is_admin = 1);
CREATE INDEX toolkits_by_owner ON toolkits (owner_id);

-- The only tools of a toolkit anyone may see or call; no rows means all of them.
-- By name, so that the list survives a re-import (tool ids change, names do not).
CREATE TABLE toolkit_allowed_tools (
    toolkit_id  INTEGER NOT NULL REFERENCES toolkits(id) ON DELETE CASCADE,
    tool_name   TEXT NOT NULL,
    PRIMARY KEY (toolkit_id, tool_name)
) WITHOUT ROWID;

-- An owner's grant of a toolkit (or of some of its tools) to an agent. A disabled grant
-- opts the agent out of a platform default.
CREATE TABLE grants (
    id          INTEGER PRIMARY KEY,
    agent_id    INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    toolkit_id  INTEGER NOT NULL REFERENCES toolkits(id) ON DELETE CASCADE,
    enabled     INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (agent_id, toolkit_id)
);
CREATE INDEX grants_by_toolkit ON grants (toolkit_id);

-- Selected tools of a grant; no rows means the whole toolkit.
CREATE TABLE grant_tools (
    grant_id    INTEGER NOT NULL REFERENCES grants(id) ON DELETE CASCADE,
    tool_name   TEXT NOT NULL,
    PRIMARY KEY (grant_id, tool_name)
) WITHOUT ROWID;

-- One row per import a user started through the API: the hourly import limit counts these.
CREATE TABLE import_events (
    user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    at          REAL NOT NULL                  -- unix seconds
);
CREATE INDEX import_events_by_user ON import_events (user_id, at);
