"""The cache generation: a counter that moves when anything a remembered lookup reads changes.

Why not ``PRAGMA data_version``: it moves on *every* commit, and every tool call commits its
audit row and charge. Keyed on it, the remembered keys, tools, scopes and connections were
thrown away after each group commit, so a steady stream of calls paid three or four reader
hops per call for lookups whose answers had not changed. The counter lives in the database
(``cache_generation``) and triggers on every ordinary table bump it, so a change made by any
connection or process (the CLI beside a serving appliance, a test writing with ``sqlite3``)
still clears the memo on the very next request. Tables listed in ``cache_exempt`` (the
append-only call records: audit rows, ledger entries, import events) do not bump it; nothing
remembered is derived from them, and the ledger keeps its own figures (``ledger/book.py``).

Triggers are (re)installed after the migrations on every open, so a table added by a later
migration is covered without that migration having to remember it. Virtual tables (FTS5,
vec0) cannot carry triggers; they are written together with the ordinary table they index
(``tools``, ``tool_embeddings``), whose triggers fire in the same transaction.
"""

from __future__ import annotations

import re

import sqlean

COUNTER_SQL = "SELECT n FROM cache_generation WHERE id = 1"
_OPS = {"ins": "INSERT", "upd": "UPDATE", "del": "DELETE"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


FALLBACK_SQL = "PRAGMA data_version"  # a schema without the counter (a test's own migrations)


def counter_sql(conn: sqlean.Connection) -> str:
    """What to read for the generation on this database: the counter, else ``data_version``."""
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'cache_generation'")
    return COUNTER_SQL if found.fetchall() else FALLBACK_SQL  # fetchall: see ``read``


def covered_tables(conn: sqlean.Connection) -> list[str]:
    """Ordinary tables whose changes must clear remembered lookups."""
    exempt = {row[0] for row in conn.execute("SELECT name FROM cache_exempt")}
    names = []
    for row in conn.execute("PRAGMA main.table_list"):
        name, kind = row[1], row[2]
        if kind != "table" or name.startswith("sqlite_") or name in exempt:
            continue
        names.append(name)
    return sorted(names)


def install_triggers(conn: sqlean.Connection) -> int:
    """Create the missing bump triggers (writer thread, after migrations); return how many."""
    if counter_sql(conn) != COUNTER_SQL:
        return 0
    existing = {
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'cache_bump_%'"
        )
    }
    wanted = []
    for table in covered_tables(conn):
        if not _IDENT.match(table):  # never interpolate a name we did not expect
            raise ValueError(f"unexpected table name {table!r}")
        for suffix, op in _OPS.items():
            name = f"cache_bump_{table}_{suffix}"
            if name not in existing:
                wanted.append(
                    f"CREATE TRIGGER {name} AFTER {op} ON {table} FOR EACH ROW "
                    "BEGIN UPDATE cache_generation SET n = n + 1 WHERE id = 1; END"
                )
    if not wanted:
        return 0
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in wanted:
            conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return len(wanted)


def read(conn: sqlean.Connection, sql: str = COUNTER_SQL) -> int:
    # fetchall, not fetchone: a statement left un-reset keeps its read transaction open, and
    # the connection would go on seeing that old snapshot (data_version included).
    return int(conn.execute(sql).fetchall()[0][0])
