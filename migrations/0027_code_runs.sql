-- Code over tools (issue 24): every call a script makes (use_code, run_code) is an audit row
-- of its own, and the script's run has one too; `code_run` ties them together (the run's id,
-- 16 hex characters; NULL for calls made directly). The run's own row has the script's hash,
-- the count of its calls and its end in `detail`, never the script or its arguments.
ALTER TABLE audit_log ADD COLUMN code_run TEXT CHECK (code_run IS NULL OR length(code_run) <= 32);
CREATE INDEX audit_by_code_run ON audit_log (code_run) WHERE code_run IS NOT NULL;
