-- What agents did with their searches (issue 22, item 7): one row per search_tools use case
-- by a keyed caller, written once its outcome is known: the result the same caller then
-- called (its 1-based rank among the names shown) or, past the window, a miss (rank NULL).
-- Never a call's arguments. Bounded by age and row count (search/usage.prune_in).
CREATE TABLE search_usage (
    id        INTEGER PRIMARY KEY,
    at        REAL NOT NULL,            -- when the search was made (Unix seconds)
    user_id   INTEGER,                  -- the caller's user (an agent's owner)
    agent_id  INTEGER,                  -- NULL: a user's own key
    principal TEXT NOT NULL,            -- who, as the console names it
    query     TEXT NOT NULL,            -- as given, cut to search/usage.MAX_QUERY; shown escaped, never run
    qkey      TEXT NOT NULL,            -- the query normalised (search/usage.normalised): what the boost counts by
    results   TEXT NOT NULL,            -- JSON array of the names shown, best first (at most MAX_RESULTS)
    called    TEXT,                     -- the result then called; NULL: a miss
    called_id INTEGER,                  -- its tool id (the boost works on ids)
    rank      INTEGER                   -- its place in results, from 1; NULL: a miss
);
CREATE INDEX search_usage_by_key ON search_usage (qkey);
CREATE INDEX search_usage_misses ON search_usage (user_id, id) WHERE rank IS NULL;
-- Logging a search must not forget every remembered lookup: nothing remembered reads this.
INSERT INTO cache_exempt (name) VALUES ('search_usage');
