"""Who may see and call what over the faces that need a process: a real ``toolspoke serve``
(the legacy SSE face, the stdio face as a child) and the CLI as a process, with the
official SDK client and a real upstream.

The two users' world is tests/support/access_world.py; what the /mcp and admin API answers
show each of them is tested in process (tests/rpc/test_access.py).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client

from tests.support.access_world import ENV, World, populate
from tests.support.accounts import run
from tests.support.servers import REPO, PetstoreUpstream, cli, running_appliance

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with (
        PetstoreUpstream() as upstream,
        running_appliance(tmp_path_factory.mktemp("access") / "data", env=ENV) as app,
    ):
        yield populate(app, upstream)


async def _search(client: Any, query: str = "pets") -> set[str]:
    found = await client.call_tool("search_tools", {"query": query, "limit": 50})
    return {r["name"] for r in found.structured_content["results"]}


def test_the_cli_acts_for_a_key_and_manages_users_agents_keys_and_grants(world: World) -> None:
    data = world.app.data_dir
    found = cli(data, "search", "pets", "--json", "--key", world.keys["b1"])
    assert found.returncode == 0, found.stderr
    assert [r["name"] for r in json.loads(found.stdout)["results"]] == ["bobpets__listPets"]
    refused = cli(data, "call", "pets__listPets", "--key", world.keys["b1"])
    assert refused.returncode == 1 and "unknown tool" in refused.stderr
    assert cli(data, "users", "add", "carol").returncode == 0
    agent = json.loads(cli(data, "agents", "--json", "add", "c1", "--user", "carol").stdout)
    made = cli(data, "keys", "create", "--user", "carol", "--agent", str(agent["id"]))
    assert made.returncode == 0, made.stderr
    carol_key = made.stdout.strip()
    assert cli(data, "toolkits", "access", "bobpets", "--default").returncode == 0
    found = cli(data, "search", "list pets", "--json", "--key", carol_key)
    assert "bobpets__listPets" in [r["name"] for r in json.loads(found.stdout)["results"]]
    opt_out = cli(data, "grants", "add", str(agent["id"]), "bobpets", "--disabled")
    assert opt_out.returncode == 0, opt_out.stderr
    found = cli(data, "search", "list pets", "--json", "--key", carol_key)
    assert json.loads(found.stdout)["results"] == []
    assert cli(data, "toolkits", "access", "bobpets", "--no-default").returncode == 0
    prefix = carol_key[:12]
    assert prefix in cli(data, "keys").stdout
    assert cli(data, "keys", "revoke", prefix).returncode == 0
    assert cli(data, "search", "pets", "--key", carol_key).returncode == 1


def test_the_legacy_sse_face_and_the_stdio_face_show_an_agent_only_its_grants(world: World) -> None:
    async def over_sse() -> set[str]:
        headers = {"Authorization": f"Bearer {world.keys['b1']}"}
        async with Client(
            sse_client(world.app.base_url + "/sse", headers=headers), read_timeout_seconds=30
        ) as b1:
            return await _search(b1)

    async def over_stdio() -> set[str]:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "appliance", "stdio"],
            cwd=str(REPO),
            env={"TOOLSPOKE_DATA_DIR": str(world.app.data_dir), "TOOLSPOKE_API_KEY": world.keys["b1"]},
        )
        async with Client(params, read_timeout_seconds=30) as b1:
            return await _search(b1)

    assert run(over_sse()) == {"bobpets__listPets"}
    assert asyncio.run(asyncio.wait_for(over_stdio(), timeout=90)) == {"bobpets__listPets"}
