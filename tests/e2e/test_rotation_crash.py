"""kill -9 of ``toolspoke vault rotate`` while it re-seals thousands of credentials (CRASH-01).

The rotation makes a new key version, then re-seals the secrets ``--batch`` rows a
transaction. The test seeds 3000 sealed credentials through the store API, runs the real
CLI command and SIGKILLs it once the new version has sealed a random number of rows (read
from the database by another process while the rotation writes), three times over. After
each kill the database is sound (I-5), every re-sealed batch is whole, and every credential
still opens, some under the old key and some under the new. A last run completes, and the
older versions then retire, so no row was left needing them.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import subprocess
import sys
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest
import sqlean

from appliance import config
from appliance.gateway.runtime import Runtime
from appliance.vault import store
from tests.support.accounts import query
from tests.support.kills import kill_when
from tests.support.servers import REPO, cli
from tests.support.vault_seed import seed_offline

pytestmark = pytest.mark.e2e
SECRETS = 3000
BATCH = 20
KILLS = 3


def rotate(data: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "appliance", "vault", "rotate", "--batch", str(BATCH), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "TOOLSPOKE_DATA_DIR": str(data)},
    )  # fmt: skip


def kill_mid_rotation(data: Path, at: int) -> int:
    """Start a rotation and SIGKILL it once its new version seals ``at`` rows or more; how
    many rows that version had sealed when it died."""
    with closing(sqlite3.connect(data / "toolspoke.db", timeout=10)) as db:
        (before,) = db.execute("SELECT max(version) FROM vault_keys").fetchone()
        proc = rotate(data)

        def reached() -> bool:  # each call is a read of the live database
            (newest,) = db.execute("SELECT max(version) FROM vault_keys").fetchone()
            sql = "SELECT count(*) FROM secrets WHERE key_version = ?"
            return bool(newest > before and db.execute(sql, (newest,)).fetchone()[0] >= at)

        kill_when(proc, reached, f"the rotation (kill at {at} rows)")
    ((sealed,),) = query(
        data, "SELECT count(*) FROM secrets WHERE key_version = (SELECT max(version) FROM vault_keys)"
    )
    return int(sealed)


def opened(data: Path) -> tuple[dict[str, str], Counter[int]]:
    """Every credential opened the way a call opens it: slug → token; rows per key version."""
    settings = config.load(env={"TOOLSPOKE_DATA_DIR": str(data)})

    async def main() -> tuple[dict[str, str], Counter[int]]:
        rt = Runtime(settings)
        await rt.open()
        tokens: dict[str, str] = {}
        versions: Counter[int] = Counter()
        try:
            async with rt.db.read() as conn:
                rows = await conn.all(
                    "SELECT s.toolkit_id, k.slug FROM secrets s JOIN toolkits k ON k.id = s.toolkit_id"
                )
                for row in rows:
                    stored = await store.get(conn, int(row["toolkit_id"]))
                    assert stored is not None
                    tokens[row["slug"]] = (await store.open_secret(conn, rt.vault, stored))["token"]
                    versions[stored.key_version] += 1
        finally:
            await rt.close()
        return tokens, versions

    return asyncio.run(asyncio.wait_for(main(), timeout=120))


def assert_sound(data: Path) -> None:
    """I-5, read with the same SQLite build the appliance uses."""
    with closing(sqlean.connect(str(data / "toolspoke.db"))) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []


def test_kill_9_at_random_points_of_a_3000_credential_rotation_leaves_every_one_opening_and_a_rerun_completes(
    tmp_path: Path,
) -> None:
    """CRASH-01 (during vault rewrap), VAULT-06, I-5."""
    data = tmp_path / "data"
    assert cli(data, "init", env={"TOOLSPOKE_DEMO": "0"}).returncode == 0
    seed_offline(data, SECRETS)
    expected = {f"seed-{i}": f"seed-token-{i:08d}" for i in range(SECRETS)}
    seeded = random.Random()
    for kill in range(KILLS):
        at = seeded.randint(0, SECRETS - 10 * BATCH)
        sealed = kill_mid_rotation(data, at)
        # Each batch is one transaction: the kill leaves whole batches re-sealed, never part of one.
        assert sealed >= at and sealed % BATCH == 0, f"kill {kill}: {sealed} rows re-sealed (batch {BATCH})"
        assert_sound(data)
        tokens, versions = opened(data)
        assert tokens == expected
        assert versions[kill + 2] == sealed and sum(versions.values()) == SECRETS
    done = subprocess.run(
        [sys.executable, "-m", "appliance", "vault", "rotate", "--json"],
        capture_output=True, text=True, timeout=300, cwd=REPO, check=False,
        env={**os.environ, "TOOLSPOKE_DATA_DIR": str(data)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"version": KILLS + 2, "resealed": SECRETS}
    for old in range(1, KILLS + 2):
        retired = cli(data, "vault", "retire", str(old))
        assert retired.returncode == 0, retired.stderr
    assert_sound(data)
    tokens, versions = opened(data)
    assert tokens == expected
    assert versions == Counter({KILLS + 2: SECRETS})
