-- Tool-description screening (catalogue/screening.py) and changes shown as diffs.
-- screening: the findings of the tool's stored definition, a JSON list of
--   {category, reason, evidence}; '[]' when screened clean, NULL when stored before screening
--   existed (the next re-sync screens it). A tool with findings is held pending until an owner
--   approves it by name, knowing the reasons; they stay for the audit.
-- previous: the definition a change replaced ({description, input_schema, annotations}, JSON),
--   kept while the changed tool waits for approval so the owner sees a diff; NULL otherwise.
ALTER TABLE tools ADD COLUMN screening TEXT;
ALTER TABLE tools ADD COLUMN previous TEXT;
