-- Connections (issue 19, item 4): the OAuth client an operator registered beforehand with the
-- authorization server an OpenAPI toolkit's spec declares (its `authorizationCode` flow), one
-- per toolkit. The client id and authentication method are plain; the client secret, when
-- there is one, is sealed in the vault, bound to (oauth_clients, toolkit_id, client_secret).
CREATE TABLE oauth_clients (
    toolkit_id  INTEGER PRIMARY KEY REFERENCES toolkits(id) ON DELETE CASCADE,
    client_id   TEXT NOT NULL,
    auth_method TEXT NOT NULL CHECK (auth_method IN ('none', 'client_secret_basic', 'client_secret_post')),
    key_version INTEGER NOT NULL REFERENCES vault_keys(version),
    blob        BLOB NOT NULL,                 -- sealed {"client_secret": ...} or {}
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX oauth_clients_by_version ON oauth_clients (key_version);
