-- The data-flow guard (issue 20, item 7): labels on toolkits and tools, the guard's setting
-- per toolkit, and where its decisions show. The rules live in appliance/access/dataflow.py;
-- the per-agent recent-call marks are in memory (appliance/gateway/dataflow.py).

-- What a toolkit's tools do with data: read private data, bring in untrusted content, or
-- communicate outside. A toolkit's row (tool_name '') labels its every tool; a tool's row
-- (its full name, surviving a re-import) replaces the toolkit's labels for that tool, an
-- all-zero row included (a tool without the toolkit's labels).
CREATE TABLE call_labels (
    toolkit_id  INTEGER NOT NULL REFERENCES toolkits(id) ON DELETE CASCADE,
    tool_name   TEXT NOT NULL DEFAULT '',
    private     INTEGER NOT NULL DEFAULT 0 CHECK (private IN (0, 1)),
    untrusted   INTEGER NOT NULL DEFAULT 0 CHECK (untrusted IN (0, 1)),
    outward     INTEGER NOT NULL DEFAULT 0 CHECK (outward IN (0, 1)),
    PRIMARY KEY (toolkit_id, tool_name)
) WITHOUT ROWID;

-- The guard's setting for the outward tools of one toolkit: the window (seconds) within which
-- a private read and an untrusted read combine, and what then happens to an outward call
-- ('approve': a person's yes, with who may give it; 'deny'). No row: the appliance-wide
-- setting (TOOLSPOKE_DATAFLOW_WINDOW_S, TOOLSPOKE_DATAFLOW_ACTION).
CREATE TABLE dataflow_guards (
    toolkit_id  INTEGER PRIMARY KEY REFERENCES toolkits(id) ON DELETE CASCADE,
    window_s    INTEGER NOT NULL CHECK (window_s BETWEEN 1 AND 604800),
    action      TEXT NOT NULL CHECK (action IN ('approve', 'deny')),
    approver    TEXT NOT NULL DEFAULT 'owner' CHECK (approver IN ('owner', 'admin', 'user'))
);

-- Why an approval was asked, for the queue: empty for an approve rule; the guard's reason
-- (the labels, the two earlier tools, the window) when the data-flow guard asked.
ALTER TABLE approvals ADD COLUMN why TEXT NOT NULL DEFAULT '';

-- A decision's detail beside its reason code: the data-flow guard's labels, tools and window
-- on the rows of the calls it held, refused or let through with an approval.
ALTER TABLE audit_log ADD COLUMN detail TEXT;
