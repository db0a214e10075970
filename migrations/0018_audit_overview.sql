-- The console's overview (issue 18) sums recent audit rows: calls per minute, outcomes, top
-- tools, spend per toolkit and agent over the last day and 30 days. One covering index over
-- the columns those sums read, led by the time, answers each from the index alone (a month of
-- 100,000 calls: see docs/console.md, Figures) instead of a row lookup per call.
CREATE INDEX audit_overview ON audit_log (at, outcome, toolkit_id, tool, agent_id, user_id, fee_milli);
