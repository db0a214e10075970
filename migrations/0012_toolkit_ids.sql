-- Toolkit ids are never reused. SQLite gives a new row the largest id + 1, so removing the
-- newest toolkit handed its id to the next import, and with it everything kept by toolkit id:
-- the health state and probes of a running `serve` (a new toolkit refused as broken), its
-- spend windows (the charges of the removed one counted against the new one's ceilings) and
-- its audit history. The store takes each new id from here; the trigger keeps it past every
-- id ever inserted, however the row came in. Seeded past every id the database remembers.
CREATE TABLE toolkit_ids (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL
);
INSERT INTO toolkit_ids (id, last) VALUES (1, max(
    coalesce((SELECT max(id) FROM toolkits), 0),
    coalesce((SELECT max(toolkit_id) FROM audit_log), 0),
    coalesce((SELECT max(toolkit_id) FROM ledger_entries), 0)
));
CREATE TRIGGER toolkit_ids_last AFTER INSERT ON toolkits WHEN NEW.id > (SELECT last FROM toolkit_ids)
BEGIN
    UPDATE toolkit_ids SET last = NEW.id WHERE id = 1;
END;
