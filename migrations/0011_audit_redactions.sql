-- A call whose answer carried a stored secret leaves its mark in the audit row (issue 16
-- item 11): how many values were replaced by [redacted]. The reason column says
-- `secret_redacted` when the call had no other reason to record.
ALTER TABLE audit_log ADD COLUMN redacted INTEGER NOT NULL DEFAULT 0 CHECK (redacted >= 0);
