"""A key remembered by a serving appliance is refused on its next request once revoked.

The appliance remembers authenticated keys until its database changes; the test changes
it from outside, as the CLI would: another process writing the same SQLite file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlean

from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e
SECOND = "tsk_revokeme-0123456789abcdefghijklmnopqrstuv"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    with running_appliance(tmp_path_factory.mktemp("revoke") / "data") as running:
        yield running


def database(app: Appliance) -> Path:
    found = sorted(app.data_dir.glob("*.db")) + sorted(app.data_dir.glob("*.sqlite*"))
    assert found, list(app.data_dir.iterdir())
    return found[0]


def write(app: Appliance, sql: str, params: tuple[object, ...]) -> None:
    conn = sqlean.connect(str(database(app)), timeout=10)
    try:
        with conn:
            conn.execute(sql, params)
    finally:
        conn.close()


def status(app: Appliance, key: str) -> int:
    # GET /mcp: 405 once the key is accepted (no standalone stream), 401 when it is not.
    answer = httpx.get(app.mcp_url, headers={"Authorization": f"Bearer {key}"}, timeout=10)
    return answer.status_code


def test_a_key_revoked_from_another_process_is_refused_on_its_next_request(app: Appliance) -> None:
    assert status(app, SECOND) == 401
    write(
        app,
        "INSERT INTO api_keys (user_id, name, prefix, secret_hash)"
        " SELECT id, 'second', ?, ? FROM users WHERE is_admin = 1",
        (SECOND[:12], hashlib.sha256(SECOND.encode()).hexdigest()),
    )
    assert status(app, SECOND) == 405  # a refusal was not remembered: the new key works
    assert status(app, SECOND) == 405  # and now it is remembered
    write(app, "UPDATE api_keys SET revoked_at = 'now' WHERE prefix = ?", (SECOND[:12],))
    assert status(app, SECOND) == 401
    assert status(app, app.key) == 405  # the admin key is untouched
