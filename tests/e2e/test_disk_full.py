"""A full disk (issue 16 item 10): the data directory on a small tmpfs of its own, filled up.

While the disk is full no tool call reaches the upstream (a real HTTP upstream counts every
request), each is refused -32003 ``storage_unavailable`` with ``sent: false``, and
``/readyz`` says not ready; once space is freed, the same process serves again by itself:
calls reach the upstream, are charged and audited, and ``/readyz`` is ready.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.accounts import MeteredUpstream, add_user_keys, admin, credits_path, install, query
from tests.support.clients import modern_tools_call
from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e
ENV = {
    "TOOLSPOKE_DEMO": "0",
    "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
    "TOOLSPOKE_MIN_FREE_DISK_BYTES": str(1024 * 1024),
}
SIZE = "48m"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of its own (mounting one needs root, as in CI's container)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0700", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"cannot mount a tmpfs as root: {done.stderr}"
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False, timeout=30)


def _fill(disk: Path) -> Path:
    """Write a file until the disk is full (ENOSPC): the last block too."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as f:
        for chunk in (1024 * 1024, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    assert os.statvfs(disk).f_bavail == 0
    return filler


def _call(app: Appliance, key: str, tool: str) -> dict[str, Any]:
    headers, body = modern_tools_call(key, tool, {})
    r = httpx.post(app.mcp_url, headers=headers, json=body, timeout=60)
    assert r.status_code in (200, 503), r.text
    return dict(r.json())


def _ready(app: Appliance) -> httpx.Response:
    return httpx.get(app.base_url + "/readyz", timeout=30)


def _books(app: Appliance) -> tuple[int, int, int]:
    """Audited ok calls of the toolkit, charges, and the payer's balance (millicredits)."""
    ok = query(app.data_dir, "SELECT count(*) FROM audit_log WHERE toolkit = 'meter' AND outcome = 'ok'")
    charges = query(app.data_dir, "SELECT count(*) FROM ledger_entries WHERE kind = 'charge'")
    balance = query(
        app.data_dir,
        "SELECT sum(amount_milli) FROM ledger_entries e JOIN users u ON u.id = e.user_id"
        " WHERE u.name = 'payer'",
    )
    return int(ok[0][0]), int(charges[0][0]), int(balance[0][0])


def test_with_the_disk_full_no_call_reaches_the_upstream_and_service_resumes_when_space_returns(
    small_disk: Path,
) -> None:
    upstream = MeteredUpstream()
    try:
        with running_appliance(small_disk / "data", env=ENV) as app:
            (key,) = add_user_keys(app.data_dir, "payer", 1)
            assert admin(app, "POST", credits_path(app, "payer"), {"amount": 100}).status_code == 201
            tool = install(app, "meter", upstream, fee=1)
            first = _call(app, key, tool)
            assert "result" in first and not first["result"].get("isError"), first
            assert upstream.count == 1 and _books(app) == (1, 1, 99_000)
            assert _ready(app).status_code == 200

            filler = _fill(small_disk)
            # /readyz looks afresh; the call path trusts a comfortable figure for 0.25 s
            ready = _ready(app)
            assert ready.status_code == 503, ready.text
            assert any("nearly full" in p for p in ready.json()["problems"]), ready.text
            for _ in range(5):
                refused = _call(app, key, tool)
                assert refused["error"]["code"] == -32003, refused
                assert refused["error"]["data"]["reason"] == "storage_unavailable"
                assert refused["error"]["data"]["sent"] is False
            assert upstream.count == 1  # nothing was dispatched

            filler.unlink()  # space returns; nothing is restarted
            deadline = time.monotonic() + 30
            while _ready(app).status_code != 200:
                assert time.monotonic() < deadline, _ready(app).text
                time.sleep(0.1)
            again = _call(app, key, tool)
            assert "result" in again and not again["result"].get("isError"), again
            assert upstream.count == 2
            assert _books(app) == (2, 2, 98_000)  # charged and audited
            assert app.proc.poll() is None
    finally:
        upstream.close()
