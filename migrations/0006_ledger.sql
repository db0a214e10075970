-- Spend and accounting (issue 6): toolkit prices and ceilings, the credit ledger, the audit log.
-- Amounts are integers in millicredits (1 credit = 1000): exact sums, fees like 0.1 credit.
-- Times are unix seconds (UTC); windows are UTC days and months (appliance/ledger/windows.py).

-- Per toolkit: the fee a non-owner pays per call and the daily/monthly ceilings (0: none).
-- No row means the defaults (TOOLSPOKE_DEFAULT_FEE, no ceilings).
CREATE TABLE toolkit_prices (
    toolkit_id     INTEGER PRIMARY KEY REFERENCES toolkits(id) ON DELETE CASCADE,
    fee_milli      INTEGER NOT NULL CHECK (fee_milli >= 0),
    daily_limit    INTEGER NOT NULL DEFAULT 0 CHECK (daily_limit >= 0),
    monthly_limit  INTEGER NOT NULL DEFAULT 0 CHECK (monthly_limit >= 0),
    -- what a ceiling counts: calls, or millicredits charged
    limit_unit     TEXT NOT NULL DEFAULT 'calls' CHECK (limit_unit IN ('calls', 'credits')),
    updated_at     REAL NOT NULL
);

-- One row per authenticated tools/call attempt, rejected ones included. Never an argument
-- value: only who, what, how it ended, how long, how big, what it cost.
CREATE TABLE audit_log (
    id           INTEGER PRIMARY KEY,
    at           REAL NOT NULL,
    user_id      INTEGER,
    user_name    TEXT NOT NULL DEFAULT '',
    agent_id     INTEGER,
    agent_name   TEXT,
    key_prefix   TEXT NOT NULL DEFAULT '',
    toolkit_id   INTEGER,                      -- no foreign key: history outlives a toolkit
    toolkit      TEXT,
    project      TEXT,
    tool         TEXT NOT NULL,                -- the underlying tool, never the runner
    runner       TEXT,                         -- use_tool / run_tool / run_destructive_tool, or NULL
    outcome      TEXT NOT NULL CHECK (outcome IN
                   ('ok', 'upstream_error', 'is_error', 'blocked', 'rate_limited', 'quota', 'invalid')),
    reason       TEXT,
    duration_ms  REAL NOT NULL DEFAULT 0,
    bytes        INTEGER NOT NULL DEFAULT 0,
    fee_milli    INTEGER NOT NULL DEFAULT 0,
    owner_call   INTEGER NOT NULL DEFAULT 0 CHECK (owner_call IN (0, 1))
);
CREATE INDEX audit_by_toolkit ON audit_log (toolkit_id, id);
CREATE INDEX audit_by_user ON audit_log (user_id, id);
CREATE INDEX audit_by_agent ON audit_log (agent_id, id);
CREATE INDEX audit_by_time ON audit_log (at);

-- The credit ledger: append-only. A balance is the sum of a user's entries.
-- grant: an admin adds (or, negative, takes back) credit; charge: a call's fee (negative);
-- void: reverses one charge (refers_to), positive. Corrections are new entries, never edits.
CREATE TABLE ledger_entries (
    id           INTEGER PRIMARY KEY,
    at           REAL NOT NULL,
    user_id      INTEGER NOT NULL,             -- whose balance; no foreign key: history stays
    kind         TEXT NOT NULL CHECK (kind IN ('grant', 'charge', 'void')),
    amount_milli INTEGER NOT NULL,
    toolkit_id   INTEGER,
    audit_id     INTEGER,                      -- a charge's call (no foreign key: audit rows are pruned)
    refers_to    INTEGER REFERENCES ledger_entries(id) UNIQUE,  -- a void's charge (once)
    actor        TEXT NOT NULL DEFAULT '',
    note         TEXT NOT NULL DEFAULT '',
    CHECK (kind != 'charge' OR (amount_milli <= 0 AND audit_id IS NOT NULL)),
    CHECK (kind != 'void' OR (amount_milli >= 0 AND refers_to IS NOT NULL))
);
CREATE INDEX ledger_by_user ON ledger_entries (user_id);
CREATE INDEX ledger_charges ON ledger_entries (toolkit_id, at) WHERE kind = 'charge';

CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries
BEGIN
    SELECT RAISE(ABORT, 'ledger entries are append-only: add a correcting entry');
END;
CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries
BEGIN
    SELECT RAISE(ABORT, 'ledger entries are append-only: add a correcting entry');
END;
