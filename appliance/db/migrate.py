"""Numbered SQL migrations, applied in order, each in one transaction with its record."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import sqlean

from appliance.errors import ConfigError

if TYPE_CHECKING:
    from appliance.db.connection import ReadConn

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def default_migrations_dir() -> Path:
    """``migrations/`` inside the one-file bundle, else beside the source tree."""
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        return Path(bundle) / "migrations"
    return Path(__file__).resolve().parents[2] / "migrations"


# Numbers handed to parallel branches in session 3 that none of them needed: never used.
# 23 and 24 are held by branches under way beside the data-flow guard's 0025 (issue 20's fees
# and keys, per-user connections): a tree without them yet is whole; once merged, present.
_RESERVED: frozenset[int] = frozenset({8, 9, 23, 24})


def discover(directory: Path) -> list[tuple[int, str, Path]]:
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if not match:
            raise ConfigError(f"migration file {path.name} is not named NNNN_name.sql")
        found.append((int(match.group(1)), match.group(2), path))
    numbers = [n for n, _, _ in found]
    expected = [n for n in range(1, max(numbers, default=0) + 1) if n in numbers or n not in _RESERVED]
    if numbers != expected:
        raise ConfigError(f"migrations in {directory} are not numbered 1..N without gaps: {numbers}")
    return found


def apply_migrations(conn: sqlean.Connection, directory: Path) -> list[int]:
    """Apply what is missing; return the versions applied now. Runs on the writer thread."""
    if not directory.is_dir():
        raise ConfigError(f"migrations directory {directory} is missing")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
        " applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))"
    )
    done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    known = discover(directory)
    newest = max((n for n, _, _ in known), default=0)
    if done and max(done) > newest:
        raise ConfigError(
            f"the database is at schema version {max(done)}, newer than this toolspoke "
            f"knows ({newest}); use a newer toolspoke"
        )
    applied = []
    for number, name, path in known:
        if number in done:
            continue
        # Split before BEGIN: a malformed file must not leave a transaction open.
        statements = _statements(path.read_text(encoding="utf-8"))
        try:
            conn.execute("BEGIN IMMEDIATE")
            # executescript would COMMIT first; run statement by statement inside our transaction.
            for statement in statements:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", (number, name))
            conn.execute("COMMIT")
        except sqlean.DatabaseError as exc:
            conn.execute("ROLLBACK")
            raise ConfigError(f"migration {path.name} failed: {exc}") from None
        applied.append(number)
    return applied


def _statements(sql: str) -> list[str]:
    """Split a script on complete statements, as SQLite itself judges completeness."""
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlean.complete_statement(buf):
            if buf.strip():
                out.append(buf)
            buf = ""
    if buf.strip() and not all(ln.strip().startswith("--") or not ln.strip() for ln in buf.splitlines()):
        raise ConfigError("a migration ends with an incomplete statement")
    return out


async def applied_versions(conn: ReadConn) -> set[int]:
    """The migrations the database records as applied (readiness compares them with ``discover``)."""
    rows = await conn.all("SELECT version FROM schema_migrations")
    return {int(r["version"]) for r in rows}
