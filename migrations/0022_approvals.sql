-- Approvals (issue 20, items 1, 2, 3 out of band and 8): a person's yes bound to one call.
-- The rules live in appliance/access/approvals.py and appliance/access/policy.py; the
-- pipeline's approval stage is appliance/gateway/approvals.py.

-- A third action, 'approve', and who may approve (only read for 'approve' rules):
-- 'owner' (the toolkit's owner or an admin: the default), 'admin' (admins only), or 'user'
-- (also the user the calling agent acts for). SQLite cannot widen a CHECK in place, so the
-- table is rebuilt (a few rows per toolkit); its cache triggers are reinstalled on open.
CREATE TABLE call_policies_new (
    toolkit_id  INTEGER NOT NULL REFERENCES toolkits(id) ON DELETE CASCADE,
    tool_name   TEXT NOT NULL DEFAULT '',
    kind        TEXT NOT NULL DEFAULT '' CHECK (kind IN ('', 'read', 'write', 'destructive')),
    action      TEXT NOT NULL CHECK (action IN ('allow', 'approve', 'deny')),
    approver    TEXT NOT NULL DEFAULT 'owner' CHECK (approver IN ('owner', 'admin', 'user')),
    CHECK (tool_name = '' OR kind = ''),
    PRIMARY KEY (toolkit_id, tool_name, kind)
) WITHOUT ROWID;
INSERT INTO call_policies_new (toolkit_id, tool_name, kind, action)
    SELECT toolkit_id, tool_name, kind, action FROM call_policies;
DROP TABLE call_policies;
ALTER TABLE call_policies_new RENAME TO call_policies;

-- One approval covers exactly one call: the principal ('agent:<id>', 'user:<id>' or
-- 'operator', as idempotency keys are scoped), the tool, the SHA-256 of the canonical JSON of
-- its arguments and the policy version, until expires_at; 'used' once it ran. The arguments
-- are kept as canonical JSON for the approver to read.
CREATE TABLE approvals (
    id              TEXT PRIMARY KEY,             -- 'apr_' and 128 random bits: the retry names it
    principal       TEXT NOT NULL,
    user_id         INTEGER,                      -- who asked, as the audit row names them
    user_name       TEXT NOT NULL DEFAULT '',
    agent_id        INTEGER,
    agent_name      TEXT,
    key_prefix      TEXT NOT NULL DEFAULT '',
    toolkit_id      INTEGER NOT NULL REFERENCES toolkits(id) ON DELETE CASCADE,
    toolkit         TEXT NOT NULL,
    project         TEXT NOT NULL,
    tool            TEXT NOT NULL,
    kind            TEXT NOT NULL,
    arguments       TEXT NOT NULL,
    args_hash       TEXT NOT NULL,
    policy_version  INTEGER NOT NULL,
    rule            TEXT NOT NULL,                -- the rule's level: 'toolkit', 'kind' or 'tool'
    approver        TEXT NOT NULL CHECK (approver IN ('owner', 'admin', 'user')),
    fee_milli       INTEGER NOT NULL DEFAULT 0,   -- what the call would cost the caller when asked
    idempotency_key TEXT,                         -- a retry with this key may use it instead of the id
    state           TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'used', 'expired')),
    created_at      REAL NOT NULL,
    expires_at      REAL NOT NULL,
    decided_at      REAL,
    decided_by      TEXT NOT NULL DEFAULT '',
    used_at         REAL
);
-- The same call asked again reuses its open approval: at most one per binding.
CREATE UNIQUE INDEX approvals_open ON approvals (principal, tool, args_hash, policy_version)
    WHERE state IN ('pending', 'approved');
CREATE INDEX approvals_due ON approvals (expires_at) WHERE state IN ('pending', 'approved');
CREATE INDEX approvals_by_toolkit ON approvals (toolkit_id, state);

-- No remembered lookup reads approvals, and a consumed one must not make every process
-- forget its keys, tools and scopes.
INSERT INTO cache_exempt (name) VALUES ('approvals');
