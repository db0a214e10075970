-- Call policy (issue 20, items 1 and 4): what may run, beyond what may be seen.
-- The rules these tables encode live in appliance/access/policy.py (one place); the pipeline's
-- policy stage (gateway/policy.py) refuses by them and search leaves out what they refuse.

-- The read-only guard: a read-only key or agent runs read tools only. A key is read-only when
-- it is marked so or its agent is (an agent's state never widens a key).
ALTER TABLE agents ADD COLUMN read_only INTEGER NOT NULL DEFAULT 0 CHECK (read_only IN (0, 1));
ALTER TABLE api_keys ADD COLUMN read_only INTEGER NOT NULL DEFAULT 0 CHECK (read_only IN (0, 1));

-- A toolkit's rules: for the whole toolkit (tool_name and kind empty), for its tools of one
-- kind, or for one tool by its full name (so the rule survives a re-import, like allow-lists).
-- The most specific rule wins: tool over kind over toolkit; no rule is allow.
CREATE TABLE call_policies (
    toolkit_id  INTEGER NOT NULL REFERENCES toolkits(id) ON DELETE CASCADE,
    tool_name   TEXT NOT NULL DEFAULT '',
    kind        TEXT NOT NULL DEFAULT '' CHECK (kind IN ('', 'read', 'write', 'destructive')),
    action      TEXT NOT NULL CHECK (action IN ('allow', 'deny')),
    CHECK (tool_name = '' OR kind = ''),
    PRIMARY KEY (toolkit_id, tool_name, kind)
) WITHOUT ROWID;

-- The policy's version, bumped by every change to a rule or a read-only flag: an approval
-- (a later slice of issue 20) binds to it, so a change of policy voids what was approved.
CREATE TABLE call_policy_version (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    version  INTEGER NOT NULL
);
INSERT INTO call_policy_version (id, version) VALUES (1, 0);
