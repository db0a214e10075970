-- Console sessions (issue 18): a signed-in browser holds a random token in a cookie; only its
-- SHA-256 is kept here. A session acts through the API key it was opened with, so revoking
-- that key (or removing its user) ends every session of it at the next request.
CREATE TABLE console_sessions (
    id          INTEGER PRIMARY KEY,
    token_hash  TEXT NOT NULL UNIQUE,
    key_id      INTEGER NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
    created_at  REAL NOT NULL,                 -- unix seconds: the absolute cap counts from here
    seen_at     REAL NOT NULL                  -- unix seconds: the idle expiry counts from here
);
CREATE INDEX console_sessions_by_key ON console_sessions (key_id);
-- Renewing a session writes its row while it is used; nothing remembered reads this table
-- (each request reads its session fresh), so it must not clear the memo of every lookup.
INSERT INTO cache_exempt (name) VALUES ('console_sessions');
