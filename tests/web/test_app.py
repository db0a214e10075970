"""``create_app`` served in process (tests/support/inprocess.py) runs the same start and stop
hooks as ``toolspoke serve``: what every in-process test relies on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.inprocess import BASE_URL, served_in_process

pytestmark = pytest.mark.inprocess


def test_the_start_hooks_open_the_runtime_install_the_demo_and_the_stop_hooks_close_it(
    tmp_path: Path,
) -> None:
    with served_in_process(tmp_path / "data") as app:
        rt = app.rt
        assert rt.self_base_url == BASE_URL  # announce ran, with the address the harness serves
        api = app.client(headers={"Authorization": f"Bearer {app.key}"})
        assert api.get("/readyz").status_code == 200
        kits = api.get("/api/v1/toolkits").json()["toolkits"]
        assert "demo" in {k["toolkit"] for k in kits}, kits
        assert (tmp_path / "data" / "toolspoke.db-wal").exists()  # the database is open
    assert all(client.is_closed for client in app.clients)  # closed with the app
    # After the stop hooks: the runtime closed its database (SQLite folds the WAL back in and
    # removes it when the last connection closes).
    assert not (tmp_path / "data" / "toolspoke.db-wal").exists()
