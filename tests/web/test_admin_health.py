"""The health routes of the admin API (web/admin_health.py), in process: an admin key is
needed, an unknown toolkit is named as such, and a probe of the demo answers at once.

Moved from tests/e2e/test_health.py, which keeps the probes of real upstreams and children.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.inprocess import InProcess, served_in_process

pytestmark = pytest.mark.inprocess


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    env = {"TOOLSPOKE_HEALTH_INTERVAL_S": "0"}
    with served_in_process(tmp_path_factory.mktemp("health") / "data", env=env) as served:
        yield served


def test_health_routes_need_an_admin_key_and_name_unknown_toolkits(app: InProcess) -> None:
    anonymous = app.client(timeout=10)
    assert anonymous.get("/api/v1/health/toolkits").status_code == 401
    admin = app.client(headers={"Authorization": f"Bearer {app.key}"}, timeout=10)
    assert admin.post("/api/v1/toolkits/nope/probe").status_code == 404
    demo = admin.post("/api/v1/toolkits/demo/probe")
    assert demo.status_code == 200
    assert demo.json()["probed"] is True and demo.json()["health"] == "active"
