"""Idempotency keys where a process matters: a call cut off by kill -9 and replayed after a
restart, and a client that gives up mid-call by closing its connection. A real appliance,
real SDK clients, a real counting upstream (tests/support/accounts.py).

The rest of the idempotency rules are tested in process (tests/rpc/test_idempotency.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.accounts import (
    MeteredUpstream,
    add_user_keys,
    admin,
    as_key,
    credits_path,
    install,
    open_db,
    run,
)
from tests.support.clients import connect
from tests.support.idempotent import ENV, KEY, REPLAY, charges, keyed, raw_call, two_agents
from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    data = tmp_path_factory.mktemp("idem") / "data"
    with running_appliance(data, env=ENV) as running:
        yield running


@pytest.fixture(scope="module")
def upstream() -> Iterator[MeteredUpstream]:
    up = MeteredUpstream()
    yield up
    up.close()


@pytest.fixture(scope="module")
def agents(app: Appliance, upstream: MeteredUpstream) -> tuple[str, str]:
    return two_agents(app, upstream)


def test_a_call_cut_off_by_kill_9_is_never_run_again_by_its_key_after_restart(tmp_path: Path) -> None:
    """LEDGER-05/LEDGER-06: a claim left running by a killed process replays `interrupted`."""
    data = tmp_path / "data"
    env = {"TOOLSPOKE_HEALTH_INTERVAL_S": "0", "TOOLSPOKE_UPSTREAM_TIMEOUT_S": "20"}
    upstream = MeteredUpstream()

    async def first_call(app: Appliance, key: str) -> None:
        params = {"name": "cut__slow", "arguments": {}, "_meta": {KEY: "cut-1"}}
        call = asyncio.ensure_future(asyncio.to_thread(raw_call, app, key, "/mcp", params))
        assert await asyncio.to_thread(upstream.arrived.wait, 30)
        app.proc.kill()  # SIGKILL while the upstream holds the call
        with pytest.raises(httpx.TransportError):
            await call

    async def retry(app: Appliance, key: str) -> Any:
        async with connect(as_key(app, key), mode="legacy") as client:
            return await keyed(client, "cut__slow", "cut-1")

    try:
        with running_appliance(data, env=env) as app:
            (key,) = add_user_keys(data, "joe", 1)
            assert admin(app, "POST", credits_path(app, "joe"), {"amount": 10}).status_code == 201
            install(app, "cut", upstream)
            run(first_call(app, key))
            assert app.proc.wait(timeout=10) == -9
        with running_appliance(data, env=env) as app:
            again = run(retry(app, key))
    finally:
        upstream.close()
    assert upstream.paths["/slow"] == 1
    assert again.is_error and again.meta["toolspoke/reason"] == "interrupted"
    assert again.meta[REPLAY] is True
    with closing(open_db(data)) as db:
        assert db.execute("SELECT state FROM idempotency_keys").fetchall() == [("done",)]


def test_a_client_that_gives_up_mid_call_and_retries_never_runs_the_call_twice(
    app: Appliance, upstream: MeteredUpstream, agents: tuple[str, str]
) -> None:
    """LEDGER-05, LEDGER-06: the client times out while the upstream holds the call, then
    retries: it gets in-progress refusals until the cut-off call is settled as `interrupted`,
    charged once (the upstream may have acted), and the upstream sees one request."""
    upstream.release.clear()
    upstream.arrived.clear()
    before, charged = upstream.paths["/slow"], charges(app)
    key = agents[1]
    params = {"name": "idem__slow", "arguments": {}, "_meta": {KEY: "gave-up-1"}}

    async def scenario() -> list[dict[str, Any]]:
        call = asyncio.ensure_future(asyncio.to_thread(raw_call, app, key, "/mcp", params, 2.0))
        assert await asyncio.to_thread(upstream.arrived.wait, 30)
        with pytest.raises(httpx.ReadTimeout):
            await call  # the client gives up after 2 s and closes its connection
        answers = []
        for _ in range(200):  # bounded: each retry is a full request
            answer = await asyncio.to_thread(raw_call, app, key, "/mcp", params)
            answers.append(answer)
            if "result" in answer:
                break
        return answers

    try:
        answers = run(scenario())
    finally:
        upstream.release.set()
    *waiting, settled = answers
    assert all(a["error"]["data"]["reason"] == "idempotency_in_progress" for a in waiting)
    assert settled["result"]["isError"]
    assert settled["result"]["_meta"]["toolspoke/reason"] == "interrupted"
    assert upstream.paths["/slow"] - before == 1
    assert charges(app) - charged == 1
