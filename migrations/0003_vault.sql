-- The credential vault: versioned data keys (each sealed under the master key) and one
-- sealed credential per toolkit. No plaintext secret is ever written to this database.

CREATE TABLE vault_keys (
    version     INTEGER PRIMARY KEY,
    wrapped     BLOB,                          -- the data key sealed under the master key; NULL once retired
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    retired_at  TEXT
);

CREATE TABLE secrets (
    toolkit_id  INTEGER PRIMARY KEY REFERENCES toolkits(id) ON DELETE CASCADE,
    scheme      TEXT NOT NULL
        CHECK (scheme IN ('bearer', 'header', 'query', 'cookie', 'basic', 'oauth2', 'env')),
    settings    TEXT NOT NULL DEFAULT '{}',    -- JSON, not secret: header/query/cookie name, token URL, scope
    key_version INTEGER NOT NULL REFERENCES vault_keys(version),
    blob        BLOB NOT NULL,                 -- vault blob (crypto.py), bound to (secrets, toolkit_id, credential)
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX secrets_by_version ON secrets (key_version);

-- The owner may raise (or lower) the response byte cap of one toolkit; NULL: the setting.
ALTER TABLE toolkits ADD COLUMN max_response_bytes INTEGER
    CHECK (max_response_bytes IS NULL OR max_response_bytes > 0);
