"""The header checks every MCP request passes (web/guards.py), in process: a Host not served
here has its own status and code.

Moved from tests/e2e/test_hostile_protocol.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.clients import INIT
from tests.support.inprocess import InProcess, served_in_process

pytestmark = pytest.mark.inprocess


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    with served_in_process(tmp_path_factory.mktemp("guards") / "data") as served:
        yield served


@pytest.fixture
def http(app: InProcess) -> Iterator[httpx.Client]:
    with app.mcp_client() as client:
        yield client


def test_a_host_not_served_here_is_421_with_its_own_code(http: httpx.Client) -> None:
    answer = http.post("/mcp", json=INIT, headers={"Host": "evil.example"})
    assert answer.status_code == 421
    error = answer.json()["error"]
    assert (error["code"], error["data"]["reason"]) == (-32005, "misdirected_host")
    assert error["code"] != -32001  # the rate limiter's code
