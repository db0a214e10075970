"""kill -9 in the middle of a schema migration (CRASH-01, migration variant).

The shipped migrations apply in milliseconds on a fresh or small database, too fast to kill
inside honestly. So the real migration runner (``apply_migrations`` on the appliance's own
connection settings) runs the shipped files plus one synthetic next migration, built to
take seconds (half a million rows, an index, a column added to ``users``), and is SIGKILLed
once its transaction has spilled megabytes into the ``-wal``. The database must then be at
the previous schema version, whole, with no trace of the half-done migration, and serve;
running the migrations again completes it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from appliance.db.migrate import default_migrations_dir, discover
from tests.support.accounts import query
from tests.support.kills import kill_when
from tests.support.servers import REPO, cli, running_appliance

pytestmark = pytest.mark.e2e
SLOW = """-- synthetic: long enough to be killed mid-way
CREATE TABLE crash_probe (id INTEGER PRIMARY KEY, filler BLOB NOT NULL);
INSERT INTO crash_probe (filler) SELECT randomblob(100) FROM
  (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 500000) SELECT x FROM c);
CREATE INDEX crash_probe_by_filler ON crash_probe (filler);
ALTER TABLE users ADD COLUMN crash_probe TEXT;
"""
RUNNER = (
    "import sys; from pathlib import Path\n"
    "from appliance.db.connection import _connect\n"
    "from appliance.db.migrate import apply_migrations\n"
    "print(apply_migrations(_connect(sys.argv[1], writer=True), Path(sys.argv[2])))\n"
)


def migrate(db: Path, directory: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(db), str(directory)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=dict(os.environ),
    )  # fmt: skip


def test_kill_9_inside_a_migration_leaves_the_previous_schema_whole_and_a_rerun_completes_it(
    tmp_path: Path,
) -> None:
    """CRASH-01 (during schema migration): rolled back, never half applied; I-5."""
    data = tmp_path / "data"
    assert cli(data, "init", env={"TOOLSPOKE_DEMO": "0"}).returncode == 0
    shipped = discover(default_migrations_dir())
    current = max(n for n, _, _ in shipped)
    directory = tmp_path / "migrations"
    directory.mkdir()
    for _, _, path in shipped:
        shutil.copy(path, directory / path.name)
    (directory / f"{current + 1:04d}_crash_probe.sql").write_text(SLOW, encoding="utf-8")
    db, wal = data / "toolspoke.db", data / "toolspoke.db-wal"

    proc = migrate(db, directory)
    kill_when(proc, lambda: wal.exists() and wal.stat().st_size > 8 << 20, "the migration")  # mid-transaction

    with running_appliance(data, env={"TOOLSPOKE_DEMO": "0"}) as app:  # restarts on what was left
        assert httpx.get(app.base_url + "/readyz", timeout=10).status_code == 200
        assert query(data, "SELECT max(version) FROM schema_migrations") == [(current,)]
        assert query(data, "SELECT count(*) FROM sqlite_master WHERE name LIKE 'crash_probe%'") == [(0,)]
        assert "crash_probe" not in [row[1] for row in query(data, "PRAGMA table_info(users)")]
        assert query(data, "PRAGMA integrity_check") == [("ok",)]
        assert query(data, "PRAGMA foreign_key_check") == []

    again = migrate(db, directory)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert out.strip() == f"[{current + 1}]"
    assert query(data, "SELECT count(*) FROM crash_probe") == [(500000,)]
    assert query(data, "PRAGMA integrity_check") == [("ok",)]
