-- Lore toolkits (issue 23): a knowledge base as tools. A toolkit of kind 'lore' holds
-- documents (their extracted text, read by read_document) cut into chunks (a heading path and
-- a range of that text), and an FTS5 index over the chunks (search_lore).

-- Widen the toolkits' kind check to admit 'lore'. SQLite cannot alter a CHECK; rebuilding
-- `toolkits` would cascade through every table that references it, so the stored CREATE
-- statement is edited in place (the "simpler procedure" of sqlite.org/lang_altertable.html,
-- safe here because the new check admits every row the old one did). The CREATE TABLEs
-- below move the schema cookie, so every other connection rereads the schema.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
   SET sql = replace(sql, 'CHECK (source_kind IN (''openapi'', ''catalog'', ''mcp''))',
                          'CHECK (source_kind IN (''openapi'', ''catalog'', ''mcp'', ''lore''))')
 WHERE type = 'table' AND name = 'toolkits';
PRAGMA writable_schema = RESET;

CREATE TABLE lore_documents (
    id          INTEGER PRIMARY KEY,
    toolkit_id  INTEGER NOT NULL REFERENCES toolkits(id) ON DELETE CASCADE,
    path        TEXT NOT NULL,                -- inside the folder or archive, '/'-separated
    title       TEXT NOT NULL DEFAULT '',
    format      TEXT NOT NULL CHECK (format IN ('markdown', 'text', 'html', 'pdf')),
    sha256      TEXT NOT NULL,                -- of the file's bytes: unchanged files are kept
    size        INTEGER NOT NULL,             -- the file's bytes
    body        TEXT NOT NULL,                -- the extracted text; offsets count its characters
    updated_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE (toolkit_id, path)
);

CREATE TABLE lore_chunks (
    id          INTEGER PRIMARY KEY,
    document_id INTEGER NOT NULL REFERENCES lore_documents(id) ON DELETE CASCADE,
    toolkit_id  INTEGER NOT NULL,
    heading     TEXT NOT NULL DEFAULT '',     -- the heading path, ' > '-joined
    start       INTEGER NOT NULL,             -- offset into lore_documents.body
    length      INTEGER NOT NULL
);
CREATE INDEX lore_chunks_by_document ON lore_chunks (document_id);

-- rowid = lore_chunks.id (whose toolkit_id a search filters on). Virtual tables carry no foreign key: the trigger keeps the index in
-- step with every way a chunk goes (re-import, or its document or toolkit removed: cascades
-- fire delete triggers).
CREATE VIRTUAL TABLE lore_fts USING fts5 (
    heading, body,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER lore_chunks_unindex AFTER DELETE ON lore_chunks FOR EACH ROW
BEGIN
    DELETE FROM lore_fts WHERE rowid = OLD.id;
END;

-- Nothing remembered (db/memo.py) is read from the lore tables, and an import writes
-- thousands of chunk rows: a bump per row would be wasted work.
INSERT INTO cache_exempt (name) VALUES ('lore_documents'), ('lore_chunks');
