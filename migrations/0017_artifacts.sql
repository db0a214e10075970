-- Large tool results kept aside (issue 22, item 4): a result over the threshold is stored
-- here, owned by the caller that made it, and the answer carries its head and a handle that
-- read_result pages through. Rows expire; their sizes are bounded per owner and in total.
CREATE TABLE artifacts (
    handle     TEXT PRIMARY KEY,             -- random, unguessable; read only by its owner
    owner      TEXT NOT NULL,                -- 'agent:<id>', 'user:<id>' or 'operator'
    toolkit_id INTEGER NOT NULL,             -- the call's tool: reading re-checks the caller sees it
    tool_id    INTEGER NOT NULL,
    tool       TEXT NOT NULL,                -- its full name, as the answer says it
    bytes      INTEGER NOT NULL,             -- of body (UTF-8)
    lines      INTEGER NOT NULL,
    body       BLOB NOT NULL,                -- the redacted result text; BLOB so substr() counts bytes
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX artifacts_by_owner ON artifacts (owner, created_at);
CREATE INDEX artifacts_by_expiry ON artifacts (expires_at);
-- Storing a result must not forget every remembered lookup: nothing remembered reads this.
INSERT INTO cache_exempt (name) VALUES ('artifacts');
