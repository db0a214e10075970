-- The console's overview (issue 18) sums recent audit rows. Each sum is read from an index
-- alone (never a row lookup per call), measured on 100,000 calls over 30 days (docs/console.md):
-- the last hour's minutes, the last day's outcomes and top tools: a range over the time;
CREATE INDEX audit_overview ON audit_log (at, outcome, toolkit_id, tool, agent_id, user_id, fee_milli);
-- spend per toolkit and per caller over 30 days: paid rows only, in the order of their groups,
-- so the sums need no sort (grouping a month's range by time order took 30 to 100 ms).
CREATE INDEX audit_spend_by_toolkit ON audit_log (toolkit_id, at, fee_milli, user_id) WHERE fee_milli > 0;
CREATE INDEX audit_spend_by_caller ON audit_log (agent_id, user_id, at, fee_milli, toolkit_id)
    WHERE fee_milli > 0;
