-- Connections (issue 19): a toolkit's calls use one shared credential (`secrets`, as before)
-- or each person's own (`per_user`). A user's connection is sealed in the vault like a
-- toolkit's credential, bound to (user_connections, toolkit_id:user_id, credential); the
-- plain columns (scheme, settings, status, scopes, expiry) are what the pages show.
ALTER TABLE toolkits ADD COLUMN connection_mode TEXT NOT NULL DEFAULT 'shared'
    CHECK (connection_mode IN ('shared', 'per_user'));

CREATE TABLE user_connections (
    toolkit_id  INTEGER NOT NULL REFERENCES toolkits(id) ON DELETE CASCADE,
    user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    scheme      TEXT NOT NULL CHECK (scheme IN ('bearer', 'header', 'basic', 'query', 'cookie', 'oauth')),
    settings    TEXT NOT NULL DEFAULT '{}',    -- JSON, not secret: header name, OAuth endpoints, client id
    status      TEXT NOT NULL DEFAULT 'connected' CHECK (status IN ('connected', 'needs_reconnect')),
    scopes      TEXT NOT NULL DEFAULT '',      -- space-separated, as granted
    expires_at  REAL,                          -- the access token's expiry (Unix time); NULL: none
    key_version INTEGER NOT NULL REFERENCES vault_keys(version),
    blob        BLOB NOT NULL,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (toolkit_id, user_id)
);
CREATE INDEX user_connections_by_user ON user_connections (user_id);
CREATE INDEX user_connections_by_version ON user_connections (key_version);

-- Authorizations in flight: found by the SHA-256 of their `state`, bound to the console
-- session that started them (its token's hash; NULL for the API's and CLI's headless path,
-- bound to the user alone), single use, expiring. The PKCE verifier and any registered
-- client secret are sealed; the rest (endpoints, redirect URI, resource) is plain.
CREATE TABLE oauth_pending (
    state_hash  TEXT PRIMARY KEY,
    toolkit_id  INTEGER NOT NULL REFERENCES toolkits(id) ON DELETE CASCADE,
    user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    session_hash TEXT,
    settings    TEXT NOT NULL,
    key_version INTEGER NOT NULL REFERENCES vault_keys(version),
    blob        BLOB NOT NULL,
    expires_at  REAL NOT NULL
);
