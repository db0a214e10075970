-- Fees per kind and narrower keys (issue 20, items 5 and 6).

-- A toolkit's fee for its tools of one kind, or for one tool (by its full name, so the fee
-- survives a re-import, like allow-lists and call policy). The most specific fee wins: the
-- tool's, then its kind's, then the toolkit's (toolkit_prices), then the default setting.
-- The rule lives in appliance/ledger/store.py (Price.fee_for).
CREATE TABLE toolkit_fees (
    toolkit_id  INTEGER NOT NULL REFERENCES toolkits(id) ON DELETE CASCADE,
    tool_name   TEXT NOT NULL DEFAULT '',
    kind        TEXT NOT NULL DEFAULT '' CHECK (kind IN ('', 'read', 'write', 'destructive')),
    fee_milli   INTEGER NOT NULL CHECK (fee_milli >= 0),
    CHECK ((tool_name = '') != (kind = '')),
    PRIMARY KEY (toolkit_id, tool_name, kind)
) WITHOUT ROWID;

-- A narrower key: a subset of what its agent (or its user) may call, a credit budget of its
-- own, and (already) an expiry. ``narrowed`` is a column, not the presence of rows: a key
-- whose every toolkit was removed must see nothing, never fall back to its agent's scope.
-- The rules live in appliance/access/keys.py and appliance/access/visibility.py.
ALTER TABLE api_keys ADD COLUMN narrowed INTEGER NOT NULL DEFAULT 0 CHECK (narrowed IN (0, 1));
ALTER TABLE api_keys ADD COLUMN budget_milli INTEGER CHECK (budget_milli IS NULL OR budget_milli >= 0);

-- A narrowed key's toolkits: the whole toolkit (tool_name empty) or some of its tools by
-- full name. What the key may call is this, intersected with its agent's scope at each look.
CREATE TABLE api_key_scopes (
    key_id      INTEGER NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
    toolkit_id  INTEGER NOT NULL REFERENCES toolkits(id) ON DELETE CASCADE,
    tool_name   TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (key_id, toolkit_id, tool_name)
) WITHOUT ROWID;

-- What a key with a budget has spent: its charges (a charge's actor is the calling key's
-- prefix), read when the book loads the key.
CREATE INDEX ledger_charges_by_key ON ledger_entries (actor) WHERE kind = 'charge';
