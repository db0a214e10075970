-- toolspoke schema, version 1: principals and keys, projects, toolkits, tools, search index.
-- A shipped migration is never edited; later changes go in 0002_*.sql and onwards.

CREATE TABLE users (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    is_admin    INTEGER NOT NULL DEFAULT 0 CHECK (is_admin IN (0, 1)),
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE api_keys (
    id          INTEGER PRIMARY KEY,
    user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name        TEXT NOT NULL DEFAULT '',
    prefix      TEXT NOT NULL UNIQUE,          -- shown in listings and audit; not a secret
    secret_hash TEXT NOT NULL,                 -- sha256 of the whole key; keys are 256-bit random
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    expires_at  TEXT,
    revoked_at  TEXT
);

CREATE TABLE projects (
    id          INTEGER PRIMARY KEY,
    slug        TEXT NOT NULL UNIQUE,
    title       TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
INSERT INTO projects (slug, title) VALUES ('default', 'Default project');

CREATE TABLE toolkits (
    id          INTEGER PRIMARY KEY,
    project_id  INTEGER NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    slug        TEXT NOT NULL,
    source_kind TEXT NOT NULL CHECK (source_kind IN ('openapi', 'catalog', 'mcp')),
    title       TEXT NOT NULL DEFAULT '',
    description TEXT NOT NULL DEFAULT '',
    guide       TEXT NOT NULL DEFAULT '',
    base_url    TEXT,
    source      TEXT NOT NULL DEFAULT '',
    meta        TEXT NOT NULL DEFAULT '{}',     -- JSON: spec version, security schemes, import report
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (project_id, slug)
);

CREATE TABLE tools (
    id            INTEGER PRIMARY KEY,
    toolkit_id    INTEGER NOT NULL REFERENCES toolkits(id) ON DELETE CASCADE,
    name          TEXT NOT NULL,               -- <slug>__<action>, at most 64 characters
    upstream_name TEXT NOT NULL,
    grp           TEXT NOT NULL DEFAULT '',
    title         TEXT NOT NULL DEFAULT '',
    description   TEXT NOT NULL DEFAULT '',
    kind          TEXT NOT NULL CHECK (kind IN ('read', 'write', 'destructive')),
    input_schema  TEXT NOT NULL,               -- JSON Schema
    binding       TEXT,                        -- JSON: how to call it; NULL for catalogue-only tools
    annotations   TEXT NOT NULL DEFAULT '{}',
    UNIQUE (toolkit_id, name)
);
CREATE INDEX tools_by_name ON tools (name);

-- Lexical index: one row per tool (rowid = tools.id), text prepared by search/fts.py.
-- Kept in step with `tools` by the catalogue store inside the same transaction.
-- name/toolkit/description/params are ranked by bm25(); `exact` holds one opaque token per
-- name form (full name, action, upstream name) so an exact name is found without a scan.
CREATE VIRTUAL TABLE tools_fts USING fts5 (
    name, toolkit, description, params, exact,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
