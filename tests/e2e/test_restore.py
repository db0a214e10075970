"""``toolspoke restore`` and the data-directory locks (RELIABILITY CRASH-06).

The real CLI in new processes, a real appliance beside it: restore is refused while anything
has the data directory open and changes nothing then; a backup is checked (SQLite, sound,
toolspoke's, a schema this binary can migrate, a vault the master key opens) before
anything changes; backup → mutate → restore brings the backed-up state back and the
appliance serves it with its vault open and its books sound; a kill at each step of the
swap leaves a usable database.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from appliance.db import locks
from tests.e2e.test_backup import ENV, GRANT, _books_balance, _paid_toolkit
from tests.e2e.test_stdio_face import server
from tests.e2e.test_storage_faults import HOT_WAL, _newer_schema, _scribble_mid_page, _truncate
from tests.support.accounts import MeteredUpstream, add_user_keys, admin, credits_path, query
from tests.support.clients import Client, modern_tools_call
from tests.support.servers import ADMIN_KEY, FIXTURES, REPO, Appliance, cli, running_appliance, state_files

pytestmark = pytest.mark.e2e
LOCAL = {"TOOLSPOKE_DEMO": "0", "ALLOWED_TOOL_CIDRS": "127.0.0.1/32", "PETS_TOKEN": "tok-sealed-0123456789"}


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A data directory whose vault holds a credential, and a backup of it."""
    root = tmp_path_factory.mktemp("sealed")
    data, backup = root / "data", root / "sealed.bak"
    assert cli(data, "init", env=LOCAL).returncode == 0
    spec = str(FIXTURES / "oai-v3.0-petstore.yaml")
    done = cli(
        data, "import", "openapi", spec, "--slug", "pets", "--base-url", "http://127.0.0.1:9", env=LOCAL
    )
    assert done.returncode == 0, done.stderr
    done = cli(
        data, "credentials", "set", "pets", "--scheme", "bearer", "--from-env", "PETS_TOKEN", env=LOCAL
    )
    assert done.returncode == 0, done.stderr
    assert cli(data, "backup", str(backup)).returncode == 0
    return data, backup


def _copy(sealed: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "data"
    shutil.copytree(sealed[0], data)
    return data, sealed[1]


def test_restore_help_says_it_always_replaces_keeps_the_old_database_and_has_no_force(tmp_path: Path) -> None:
    shown = cli(tmp_path / "data", "restore", "--help", process=True)  # the help as a terminal shows it
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "restore [OPTIONS] BACKUP" in text
    assert "toolspoke.db.pre-restore-<UTC time>" in text
    assert "refused while toolspoke serve, stdio or any other command" in text
    assert "There is no --force: restore always replaces the current database" in text
    assert "master key" in text and "newer one is refused" in text
    forced = cli(tmp_path / "data", "restore", str(tmp_path / "x.db"), "--force")
    assert forced.returncode == 2 and "No such option '--force'" in forced.stderr
    assert not (tmp_path / "data").exists()


async def _beside_stdio(data: Path, *args: str) -> tuple[int, subprocess.CompletedProcess[str]]:
    """Run a CLI command while a desktop client's ``toolspoke stdio`` is connected; its tool count too."""
    async with Client(server(data, ADMIN_KEY), read_timeout_seconds=60) as client:
        tools = await client.list_tools()
        done = await asyncio.to_thread(cli, data, *args)
    return len(tools.tools), done


def test_restore_is_refused_while_serve_or_stdio_runs_and_a_second_serve_is_refused_naming_the_first(
    tmp_path: Path,
) -> None:
    """CRASH-06: restore refused, naming what runs, changing nothing; stdio beside serve works."""
    data, backup = tmp_path / "data", tmp_path / "copy.bak"
    with running_appliance(data, env=ENV) as app:
        assert cli(data, "backup", str(backup)).returncode == 0
        inode, names = (data / "toolspoke.db").stat().st_ino, sorted(p.name for p in data.iterdir())
        refused = cli(data, "restore", str(backup))
        assert refused.returncode == 1, refused.stderr
        assert f"toolspoke is running on {data} (toolspoke serve, pid {app.proc.pid})" in refused.stderr
        assert "Nothing was changed" in refused.stderr and "Traceback" not in refused.stderr
        second = cli(data, "serve", "--port", "0", env=ENV)
        assert second.returncode == 1, second.stderr
        assert f"toolspoke serve is already running on {data} (pid {app.proc.pid})" in second.stderr
        # A desktop client's stdio beside serve is a supported set-up: it runs, restore still waits.
        count, beside = asyncio.run(asyncio.wait_for(_beside_stdio(data, "restore", str(backup)), 120))
        assert count > 0 and beside.returncode == 1 and "toolspoke serve" in beside.stderr
        assert (data / "toolspoke.db").stat().st_ino == inode
        assert sorted(p.name for p in data.iterdir()) == names  # no staged or pre-restore file
        assert app.proc.poll() is None
    _, alone = asyncio.run(asyncio.wait_for(_beside_stdio(data, "restore", str(backup)), 120))
    assert alone.returncode == 1, alone.stderr
    assert f"toolspoke is running on {data} (toolspoke stdio or another toolspoke command)" in alone.stderr
    assert (data / "toolspoke.db").stat().st_ino == inode
    done = cli(data, "restore", str(backup))  # everything stopped: now it goes ahead
    assert done.returncode == 0, done.stderr


def test_a_command_or_serve_started_during_a_restore_is_refused(
    sealed: tuple[Path, Path], tmp_path: Path
) -> None:
    data, _ = _copy(sealed, tmp_path)
    with locks.sole(data):  # what `toolspoke restore` holds while it works
        users = cli(data, "users", env=LOCAL)
        serve = cli(data, "serve", "--port", "0", env=LOCAL)
    for done in (users, serve):
        assert done.returncode == 1, done.stderr
        assert f"a restore is in progress on {data}" in done.stderr and "Traceback" not in done.stderr
    assert cli(data, "users", env=LOCAL).returncode == 0


def _paid_call(app: Appliance, key: str, tool: str) -> None:
    headers, body = modern_tools_call(key, tool)
    r = httpx.post(app.base_url + "/mcp", json=body, headers=headers, timeout=30)
    assert r.status_code == 200 and r.json()["result"]["isError"] is False, r.text


def test_a_restore_brings_the_backed_up_state_back_and_the_appliance_serves_it_with_its_vault(
    tmp_path: Path,
) -> None:
    """CRASH-06 / I-2 / I-5: the restored appliance starts on the backup: its books, its
    credential (opened by the same master key), none of the later changes; the replaced
    database is kept, 0600, with those changes."""
    data, backup = tmp_path / "data", tmp_path / "copy.bak"
    old, new = "tok-" + secrets.token_hex(16), "tok-" + secrets.token_hex(16)
    upstream = MeteredUpstream()
    try:
        with running_appliance(data, env=ENV) as app:
            keys, tool = _paid_toolkit(app, upstream, old)
            for _ in range(3):
                _paid_call(app, keys[0], tool)
            assert cli(data, "backup", str(backup)).returncode == 0
            # Changes after the backup: more calls, a new user, another credential.
            for _ in range(2):
                _paid_call(app, keys[0], tool)
            add_user_keys(data, "later", 1)
            r = admin(app, "PUT", "/toolkits/meter/credentials", {"scheme": "bearer", "token": new})
            assert r.status_code == 200, r.text
        assert _books_balance(data) == 5
        done = cli(data, "restore", str(backup), "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        kept = Path(report["kept"])
        assert report["path"] == str(data / "toolspoke.db") and report["schema_version"] >= 10
        assert kept.name.startswith("toolspoke.db.pre-restore-") and kept.name.endswith("Z")
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        assert stat.S_IMODE((data / "toolspoke.db").stat().st_mode) == 0o600
        with closing(sqlite3.connect(kept)) as db:  # the replaced state, whole
            assert db.execute("SELECT count(*) FROM users WHERE name = 'later'").fetchone() == (1,)
        assert _books_balance(data) == 3
        seen = upstream.authorizations[f"Bearer {old}"]
        with running_appliance(data, env=ENV) as restored:
            shown = admin(restored, "GET", credits_path(restored, "load")).json()
            assert Decimal(str(shown["balance"])) * 1000 == (GRANT - 3) * 1000
            assert query(data, "SELECT count(*) FROM users WHERE name = 'later'") == [(0,)]
            _paid_call(restored, keys[0], tool)
            # The vault opened and holds the credential of the backup's time.
            assert upstream.authorizations[f"Bearer {old}"] == seen + 1
        assert _books_balance(data) == 4
        assert sorted(p.name for p in data.iterdir() if "restore" in p.name) == [kept.name]
    finally:
        upstream.close()


def test_a_backup_with_a_wal_beside_it_is_restored_with_that_wal_folded_in(
    sealed: tuple[Path, Path], tmp_path: Path
) -> None:
    """The way back: a pre-restore copy whose WAL could not be folded in is kept with its
    -wal beside it. Restoring the main file alone would lose the commits that live only in
    that WAL; the staged copy gets them folded in, and the backup is left as it was."""
    data, _ = _copy(sealed, tmp_path)
    source = tmp_path / "kept" / "toolspoke.db.pre-restore-20261130T000000Z"
    source.parent.mkdir()
    shutil.copy(sealed[1], source)
    subprocess.run([sys.executable, "-c", HOT_WAL, str(source)], check=True, timeout=30)
    wal = Path(f"{source}-wal")
    assert wal.stat().st_size > 0
    with closing(sqlite3.connect(f"file:{source}?immutable=1", uri=True)) as main_only:
        tables = main_only.execute("SELECT name FROM sqlite_schema WHERE type = 'table'").fetchall()
    assert ("scratch",) not in tables  # the main file alone lacks the last commit
    before = (source.read_bytes(), wal.read_bytes())
    done = cli(data, "restore", str(source), "--json", env=LOCAL)
    assert done.returncode == 0, done.stderr
    assert query(data, "SELECT note FROM scratch") == [("committed before the crash",)]
    assert (source.read_bytes(), wal.read_bytes()) == before  # the backup is read, never changed
    assert not [p.name for p in data.iterdir() if p.name.startswith(".restore-")]


def test_a_wrong_or_missing_master_key_is_refused_before_anything_changes(
    sealed: tuple[Path, Path], tmp_path: Path
) -> None:
    """VAULT / CRASH-06: the key is tried on the backup's data keys first; exit 2 naming it."""
    data, backup = _copy(sealed, tmp_path)
    before = state_files(data)
    wrong = cli(data, "restore", str(backup), env={"TOOLSPOKE_MASTER_KEY": "ab" * 32})
    assert wrong.returncode == 2, wrong.stderr
    assert "the master key from TOOLSPOKE_MASTER_KEY does not open the backup's vault" in wrong.stderr
    assert "Nothing was changed" in wrong.stderr and "Traceback" not in wrong.stderr
    assert state_files(data) == before
    fresh = tmp_path / "fresh"
    missing = cli(fresh, "restore", str(backup))
    assert missing.returncode == 2, missing.stderr
    assert f"there is no master key ({fresh / 'master.key'} is missing" in missing.stderr
    assert not fresh.exists()  # a refused restore into a new directory leaves nothing
    fresh.mkdir(mode=0o700)
    shutil.copyfile(data / "master.key", fresh / "master.key")
    assert cli(fresh, "restore", str(backup)).returncode == 0  # with the key in place it goes
    shown = cli(fresh, "credentials", "show", "pets", env=LOCAL)
    assert shown.returncode == 0 and "bearer credential set" in shown.stdout, shown.stderr


def _junk(db: Path) -> None:
    db.write_bytes(b"these are not the pages you are looking for\n" * 100)


def _foreign(db: Path) -> None:
    db.unlink()
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("CREATE TABLE notes (body TEXT)")


def _renamed_migration(db: Path) -> None:
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE schema_migrations SET name = 'something_else' WHERE version = 3")


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (_junk, "is not an SQLite database (no SQLite header)"),
        (_truncate, "cannot be opened as a database: database disk image is malformed"),
        (_scribble_mid_page, "failed its integrity check"),
        (_foreign, "is not a toolspoke database (no schema_migrations table)"),
        (
            _renamed_migration,
            "is not a toolspoke database (its migration 3 is 'something_else', toolspoke's is",
        ),
        (_newer_schema, "is at schema version 9999, newer than this toolspoke knows"),
    ],
    ids=[
        "not sqlite",
        "truncated",
        "a page overwritten",
        "not toolspoke's",
        "unknown migration",
        "newer schema",
    ],
)
def test_a_backup_that_is_not_a_sound_toolspoke_database_is_refused_by_name_and_nothing_changes(
    sealed: tuple[Path, Path], tmp_path: Path, damage: Callable[[Path], None], says: str
) -> None:
    data, backup = _copy(sealed, tmp_path)
    bad = tmp_path / "bad.bak"
    shutil.copyfile(backup, bad)
    damage(bad)
    before = state_files(data)
    done = cli(data, "restore", str(bad))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: {bad} {says}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert state_files(data) == before


def _strace() -> str:
    found = shutil.which("strace")
    assert found is not None, "strace is missing: `make test` installs it (Debian's strace)"
    return found


@pytest.mark.parametrize(
    ("syscall", "target"),
    [
        ("link", "toolspoke.db"),  # before the current database is kept
        ("unlink", "toolspoke.db-wal"),  # kept, before its stale WAL files go
        ("rename", ".restore-toolspoke.db"),  # before the checked copy takes the name
    ],
    ids=["keeping", "clearing the wal", "swapping"],
)
def test_a_restore_killed_at_any_step_leaves_a_usable_database_and_the_next_restore_completes(
    sealed: tuple[Path, Path], tmp_path: Path, syscall: str, target: str
) -> None:
    """CRASH-06: SIGKILL on entering one system call of the swap (strace fault injection);
    the old database is still whole and in place, and restoring again cleans up after it."""
    data, backup = _copy(sealed, tmp_path)
    assert cli(data, "users", "add", "after-backup", env=LOCAL).returncode == 0
    env = {**os.environ, "TOOLSPOKE_DATA_DIR": str(data)}
    killed = subprocess.run(
        [
            *(_strace(), "-qq", "-f", "-o", "/dev/null", "-P", str(data / target), "-e", f"trace={syscall}"),
            *("-e", f"inject={syscall}:error=EIO:signal=KILL", sys.executable, "-m", "appliance"),
            *("restore", str(backup)),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr
    assert (data / ".restore-toolspoke.db").exists()  # killed mid-restore: the checked copy was staged
    users = cli(data, "users", env=LOCAL)  # the old database: whole, in place, with its last change
    assert users.returncode == 0 and "after-backup" in users.stdout, users.stderr
    done = cli(data, "restore", str(backup), "--json")
    assert done.returncode == 0, done.stderr
    kept = Path(json.loads(done.stdout)["kept"])
    assert sorted(p.name for p in data.iterdir() if "restore" in p.name) == [kept.name]
    with closing(sqlite3.connect(kept)) as db:
        assert db.execute("SELECT count(*) FROM users WHERE name = 'after-backup'").fetchone() == (1,)
    restored = cli(data, "users", env=LOCAL)
    assert restored.returncode == 0 and "after-backup" not in restored.stdout, restored.stderr
