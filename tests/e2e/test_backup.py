"""Online backups and WAL growth under load (RELIABILITY CRASH-06).

A real appliance serves paid calls through a credentialed OpenAPI toolkit while
``toolspoke backup`` copies its database; the copy is restored into a second appliance with
the same master key, which must find sound storage (I-5), books that add up (I-2), audit and
charges one to one, and a vault that still opens (its call reaches the upstream with the
credential).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import socket
import sqlite3
import stat
import struct
import time
from contextlib import closing
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.accounts import MeteredUpstream, add_user_keys, admin, credits_path, install, query
from tests.support.clients import modern_tools_call
from tests.support.load import PaidLoad
from tests.support.servers import Appliance, cli, running_appliance

pytestmark = pytest.mark.e2e
ENV = {
    "TOOLSPOKE_DEMO": "0",
    "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
    "TOOLSPOKE_IMPORTS_PER_HOUR": "1000",
    "TOOLSPOKE_RATE_LIMIT": "1000000",
}
GRANT = 1_000_000


def _pad(data: Path, rows: int) -> None:
    """Old call history, so that the copy takes long enough for calls to land meanwhile."""
    now = time.time() - 3600
    with closing(sqlite3.connect(data / "toolspoke.db", timeout=10)) as db, db:
        db.executemany(
            "INSERT INTO audit_log (at, user_name, key_prefix, tool, outcome, reason) "
            "VALUES (?, 'history', 'tsk_history', 'old__tool', 'invalid', ?)",
            ((now + i / 1000, "x" * 120) for i in range(rows)),
        )


def _paid_toolkit(app: Appliance, upstream: MeteredUpstream, token: str) -> tuple[list[str], str]:
    keys = add_user_keys(app.data_dir, "load", 8)
    assert admin(app, "POST", credits_path(app, "load"), {"amount": GRANT}).status_code == 201
    tool = install(app, "meter", upstream, fee=1)
    r = admin(app, "PUT", "/toolkits/meter/credentials", {"scheme": "bearer", "token": token})
    assert r.status_code == 200, r.text
    return keys, tool


def _books_balance(data: Path) -> int:
    """I-2 and audit ↔ ledger 1:1 in the database at ``data``; the number of charges."""
    assert query(data, "PRAGMA integrity_check") == [("ok",)]
    assert query(data, "PRAGMA foreign_key_check") == []
    charges, charged, audited, fees = query(
        data,
        "SELECT (SELECT count(*) FROM ledger_entries WHERE kind = 'charge'),"
        " (SELECT coalesce(-sum(amount_milli), 0) FROM ledger_entries WHERE kind = 'charge'),"
        " (SELECT count(*) FROM audit_log WHERE fee_milli > 0),"
        " (SELECT coalesce(sum(fee_milli), 0) FROM audit_log)",
    )[0]
    assert (charges, charged) == (audited, fees) == (charges, charges * 1000)
    assert query(
        data,
        "SELECT count(*) FROM ledger_entries e WHERE kind = 'charge'"
        " AND NOT EXISTS (SELECT 1 FROM audit_log a"
        " WHERE a.id = e.audit_id AND a.fee_milli = -e.amount_milli)",
    ) == [(0,)]
    balance = query(
        data,
        "SELECT sum(amount_milli) FROM ledger_entries WHERE user_id = "
        "(SELECT id FROM users WHERE name = 'load')",
    )[0][0]
    assert balance == GRANT * 1000 - charged
    return int(charges)


async def _backup_under_load(
    app: Appliance, keys: list[str], tool: str, target: Path
) -> tuple[int, int, dict[str, float]]:
    """Calls acknowledged before the backup started and after it ended; its report."""
    load = PaidLoad(app, keys, tool, workers=8)
    running = asyncio.create_task(load.run())
    try:
        await load.reach(40)
        before = load.total
        done = await asyncio.to_thread(cli, app.data_dir, "backup", str(target), "--json", timeout=120)
        after = load.total
        assert done.returncode == 0, done.stderr
        await load.reach(after + 40)  # and the calls go on after it
    finally:
        load.stop.set()
        await asyncio.wait_for(running, 60)
    assert load.other == [] and load.dropped == 0
    return before, after, dict(json.loads(done.stdout))


def test_a_backup_taken_during_paid_calls_restores_into_a_second_appliance_with_sound_books_and_an_open_vault(
    tmp_path: Path,
) -> None:
    """CRASH-06 / I-2 / I-5: an online backup under load, restored with the same master key."""
    first, second, target = tmp_path / "first", tmp_path / "second", tmp_path / "copies" / "toolspoke.bak"
    target.parent.mkdir()
    upstream = MeteredUpstream()
    token = "tok-" + secrets.token_hex(16)
    try:
        with running_appliance(first, env=ENV) as app:
            keys, tool = _paid_toolkit(app, upstream, token)
            _pad(first, 200_000)
            before, after, report = asyncio.run(_backup_under_load(app, keys, tool, target))
            # The live appliance went on answering while the copy was made.
            assert after > before, f"no call was acknowledged during the {report['seconds']} s backup"
            again = cli(first, "backup", str(target))
            assert again.returncode == 1 and "exists; pass --force" in again.stderr
        assert stat.S_IMODE(target.stat().st_mode) == 0o600  # it holds the sealed vault
        assert token.encode() not in target.read_bytes()  # sealed, never plain (VAULT-01)
        assert report["path"] == str(target) and report["bytes"] == target.stat().st_size

        # Restore: stop (done), put the copy in place, bring the same master key, start.
        second.mkdir(mode=0o700)
        shutil.copyfile(target, second / "toolspoke.db")
        shutil.copyfile(first / "master.key", second / "master.key")
        os.chmod(second / "master.key", 0o600)
        copied = _books_balance(second)
        # A consistent snapshot: everything acknowledged before the backup began, nothing
        # beyond what had been acknowledged when it ended (plus calls in flight then).
        assert before <= copied <= after + 8
        with running_appliance(second, env=ENV) as restored:
            shown = admin(restored, "GET", credits_path(restored, "load")).json()
            assert Decimal(str(shown["balance"])) * 1000 == GRANT * 1000 - copied * 1000
            seen = upstream.authorizations[f"Bearer {token}"]
            headers, body = modern_tools_call(keys[0], tool)
            r = httpx.post(restored.base_url + "/mcp", json=body, headers=headers, timeout=30)
            assert r.status_code == 200 and r.json()["result"]["isError"] is False, r.text
            # The credential opened under the same master key and went upstream.
            assert upstream.authorizations[f"Bearer {token}"] == seen + 1
        assert _books_balance(second) == copied + 1
    finally:
        upstream.close()


def test_backup_refuses_to_overwrite_without_force_and_never_leaves_a_partial_file(tmp_path: Path) -> None:
    """CRASH-06: an existing file is kept unless --force; bad targets are named; exit codes 1 and 2."""
    data = tmp_path / "data"
    assert cli(data, "init", env={"TOOLSPOKE_DEMO": "0"}).returncode == 0
    target = tmp_path / "keep.db"
    target.write_bytes(b"precious")
    refused = cli(data, "backup", str(target))
    assert refused.returncode == 1 and f"{target} exists; pass --force" in refused.stderr
    assert target.read_bytes() == b"precious"
    live = cli(data, "backup", str(data / "toolspoke.db"), "--force")
    assert live.returncode == 1 and "is the live database itself" in live.stderr
    nowhere = cli(data, "backup", str(tmp_path / "missing" / "x.db"))
    assert nowhere.returncode == 1 and "does not exist" in nowhere.stderr
    empty = cli(tmp_path / "none", "backup", str(tmp_path / "y.db"))
    assert empty.returncode == 2 and "nothing to back up" in empty.stderr
    assert not (tmp_path / "none").exists() and not (tmp_path / "y.db").exists()
    forced = cli(data, "backup", str(target), "--force")
    assert forced.returncode == 0, forced.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    with closing(sqlite3.connect(target)) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "keep.db"]  # no partial file left


async def _history_pages(app: Appliance, user: int, stop: asyncio.Event) -> int:
    """Page through the user's call history, again and again, until stopped; pages read."""
    pages = 0
    async with httpx.AsyncClient(
        base_url=app.base_url + "/api/v1", headers={"Authorization": f"Bearer {app.key}"}, timeout=60
    ) as http:
        while not stop.is_set():
            cursor = None
            while not stop.is_set():
                params = {"limit": "500", **({"cursor": cursor} if cursor else {})}
                r = await http.get(f"/users/{user}/calls", params=params)
                assert r.status_code == 200, r.text
                pages += 1
                cursor = r.json().get("next_cursor")
                if not cursor:
                    break
    return pages


@pytest.mark.timeout(150)  # 3,000 paid calls; its own waits allow 120 s a step
def test_the_wal_stays_bounded_under_sustained_paid_calls_and_a_reader_paging_the_history(
    tmp_path: Path,
) -> None:
    """CRASH-06: checkpoints complete while writers commit and a reader pages the call history."""
    data = tmp_path / "data"
    upstream = MeteredUpstream()
    wal = data / "toolspoke.db-wal"
    try:
        with running_appliance(data, env=ENV) as app:
            keys, tool = _paid_toolkit(app, upstream, "tok-" + secrets.token_hex(16))
            user = int(query(data, "SELECT id FROM users WHERE name = 'load'")[0][0])

            async def scenario() -> tuple[int, int, int]:
                load = PaidLoad(app, keys, tool, workers=12)
                running = asyncio.create_task(load.run())
                pager = asyncio.create_task(_history_pages(app, user, load.stop))
                biggest = 0
                try:
                    for step in range(1, 31):
                        await load.reach(step * 100, timeout=120)
                        biggest = max(biggest, wal.stat().st_size if wal.exists() else 0)
                finally:
                    load.stop.set()
                    await asyncio.wait_for(running, 60)
                    pages = await asyncio.wait_for(pager, 60)
                return load.total, biggest, pages

            calls, biggest, pages = asyncio.run(scenario())
            grown = (data / "toolspoke.db").stat().st_size
        print(f"\nWAL: {calls} paid calls, {pages} history pages, -wal at most {biggest} bytes, db {grown}")
        assert pages > 3 and calls >= 3000
        # SQLite checkpoints every 1000 pages (4 MiB) once no reader pins the log; a reader
        # held across awaits would let it grow with every commit instead.
        assert biggest < 16 * 1024 * 1024
    finally:
        upstream.close()


def test_an_admin_downloads_a_consistent_copy_through_the_api_and_nobody_else_can(tmp_path: Path) -> None:
    """CRASH-06: GET /api/v1/backup streams the same checked copy; other keys are refused; no
    temporary file stays in the data directory."""
    data = tmp_path / "data"
    with running_appliance(data, env=ENV) as app:
        (user_key,) = add_user_keys(data, "someone", 1)
        assert admin(app, "POST", credits_path(app, "someone"), {"amount": 42}).status_code == 201
        refused = httpx.get(app.base_url + "/api/v1/backup", headers={"Authorization": f"Bearer {user_key}"})
        assert refused.status_code == 403
        assert httpx.get(app.base_url + "/api/v1/backup").status_code == 401
        got = admin(app, "GET", "/backup")
        assert got.status_code == 200, got.text
        assert got.headers["content-type"] == "application/vnd.sqlite3"
        assert got.headers["content-disposition"].startswith('attachment; filename="toolspoke-')
        assert not [p.name for p in data.iterdir() if p.name.startswith(".download-")]
    copy = tmp_path / "downloaded.db"
    copy.write_bytes(got.content)
    with closing(sqlite3.connect(copy)) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        balance = db.execute(
            "SELECT sum(amount_milli) FROM ledger_entries e JOIN users u ON u.id = e.user_id"
            " WHERE u.name = 'someone'"
        ).fetchall()
    assert balance == [(42_000,)]


def _downloads(data: Path) -> list[str]:
    return sorted(p.name for p in data.iterdir() if p.name.startswith((".download-", "..download-")))


def _until(condition: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"not within {within}s: {what}"
        time.sleep(0.02)


def _abandon(app: Appliance, point: str) -> None:
    """Ask for a backup and go away: right after asking, while a copy is being made, or
    after the first bytes of the answer."""
    host, port = app.base_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            f"GET /api/v1/backup HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {app.key}\r\n\r\n".encode()
        )
        if point == "copying":
            copying = lambda: any(n.endswith(".partial") for n in _downloads(app.data_dir))  # noqa: E731
            _until(copying, 30, "a copy started")
        elif point == "streaming":
            got = b""
            while len(got) < 256 * 1024:
                chunk = sock.recv(65536)
                assert chunk, got[:200]
                got += chunk
            assert got.startswith(b"HTTP/1.1 200")
        # a reset, not a polite close: the server learns at once that nobody is listening
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_abandoned_downloads_leave_no_copy_behind_and_a_dead_process_s_copies_go_at_start(
    tmp_path: Path,
) -> None:
    """Issue 16 item 6: 30 downloads abandoned at different points (before the first byte,
    during the copy, mid-stream) leave no ``.download-*`` file; one a killed process left
    (a copy, a partial copy) is removed when serve starts; a full, valid backup follows."""
    data = tmp_path / "data"
    with running_appliance(data, env=ENV):
        pass
    _pad(data, 40_000)  # ~10 MB: a copy takes long enough to be walked away from
    (data / ".download-0123456789abcdef.db").write_bytes(b"\0" * 65536)
    (data / "..download-0123456789abcdef.db.beef.partial").write_bytes(b"\0" * 65536)
    with running_appliance(data, env=ENV) as app:
        assert _downloads(data) == []
        for i in range(30):
            _abandon(app, ("sent", "copying", "streaming")[i % 3])
        _until(lambda: _downloads(data) == [], 60, f"abandoned copies removed: {_downloads(data)}")
        got = admin(app, "GET", "/backup")
        assert got.status_code == 200, got.text
        assert len(got.content) == int(got.headers["content-length"])
        assert _downloads(data) == []
    copy = tmp_path / "downloaded.db"
    copy.write_bytes(got.content)
    with closing(sqlite3.connect(copy)) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        history = db.execute("SELECT count(*) FROM audit_log WHERE user_name = 'history'").fetchall()
    assert history == [(40_000,)]
