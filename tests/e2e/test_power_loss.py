"""Power loss under load (RELIABILITY CRASH-02), on a LazyFS-like filesystem.

The data directory lives on ``tests/support/lazyfs.py``: nothing written reaches the disk
until it is fsynced. Paid calls run until the appliance is killed; then the filesystem is
stopped, which drops every unsynced byte, like a power cut. The disk is checked, and the
appliance restarted on it.
"""

from __future__ import annotations

import importlib.util
import os
import select
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_spend_crash import load_until_killed
from tests.support.accounts import MeteredUpstream, add_user_keys, admin, credits_path, install, query
from tests.support.servers import REPO, running_appliance

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse: FUSE is not available here"),
]


@contextmanager
def lazy_mount(backing: Path, mount: Path) -> Iterator[None]:
    """``mount`` serves ``backing``, keeping writes in memory until fsync; leaving the block
    stops it, which drops whatever was never synced."""
    # Where /dev/fuse exists the test runs: a missing piece is a setup error, not a skip.
    assert shutil.which("fusermount3"), "fusermount3 is missing: apt-get install fuse3 (.ci/run does)"
    assert importlib.util.find_spec("mfusepy"), "mfusepy is missing: pip install -e '.[test]'"
    backing.mkdir(parents=True)
    mount.mkdir(parents=True)
    with subprocess.Popen(
        [sys.executable, "-m", "tests.support.lazyfs", str(backing), str(mount)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # libfuse's own chatter
        text=True,
    ) as proc:
        assert proc.stdout is not None
        try:
            ready, _, _ = select.select([proc.stdout], [], [], 30)
            assert ready and proc.stdout.readline().strip() == "mounted", "lazyfs did not mount"
            yield
        finally:
            subprocess.run(["fusermount3", "-u", "-z", str(mount)], check=False, timeout=30)
            proc.wait(timeout=30)


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
def test_a_power_cut_under_load_never_corrupts_and_full_loses_no_acknowledged_call(
    tmp_path: Path, synchronous: str
) -> None:
    """CRASH-02: never corrupt; FULL loses no acknowledged charge or audit row; NORMAL loses
    at most a suffix of the latest commits; the appliance restarts on what the disk kept."""
    backing, mount = tmp_path / "disk", tmp_path / "mnt"
    env = {
        "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
        "TOOLSPOKE_RATE_LIMIT": "100000",
        "TOOLSPOKE_DB_SYNCHRONOUS": synchronous,
        "TOOLSPOKE_DEMO": "false",
    }
    upstream = MeteredUpstream()
    acked: Counter[str] = Counter()
    try:
        with lazy_mount(backing, mount):
            data = mount / "data"
            with running_appliance(data, env=env) as app:
                keys = add_user_keys(data, "pat", 4)
                assert admin(app, "POST", credits_path(app, "pat"), {"amount": 100000}).status_code == 201
                tool = install(app, "meter", upstream, fee=1)
                load_until_killed(app, keys, tool, 120, acked)
        # The filesystem is gone, and with it everything unsynced: the power cut.
        disk = backing / "data"
        assert query(disk, "PRAGMA integrity_check") == [("ok",)]
        assert query(disk, "PRAGMA foreign_key_check") == []
        ids = [r[0] for r in query(disk, "SELECT id FROM audit_log ORDER BY id")]
        assert ids == list(range(1, len(ids) + 1))  # a prefix of the history: no hole
        orphans = "SELECT count(*) FROM ledger_entries e WHERE kind = 'charge' AND NOT EXISTS"
        assert query(disk, orphans + " (SELECT 1 FROM audit_log a WHERE a.id = e.audit_id)") == [(0,)]
        kept = "SELECT key_prefix, count(*) FROM audit_log WHERE outcome = 'ok' GROUP BY 1"
        audited = dict(query(disk, kept))
        if synchronous == "FULL":
            for prefix, n in acked.items():
                assert audited.get(prefix, 0) >= n, f"{prefix}: {n} acknowledged, {audited.get(prefix)} kept"
        else:
            assert sum(audited.values()) <= upstream.count
        with running_appliance(disk, env=env) as app:
            assert httpx.get(app.base_url + "/readyz", timeout=10).status_code == 200
    finally:
        upstream.close()
    assert sum(acked.values()) >= 120
