"""Who may see and call what, end to end: a real appliance, the official SDK client, a real upstream.

Two users (alice, bob) each import the petstore through the admin API and own what they
import; each has an agent with a grant on their own toolkit (bob's on one tool only). Alice
also installs her toolkit in a second project, so its names are ambiguous for her own key.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.shared.exceptions import MCPError

from tests.support.accounts import api, ok
from tests.support.clients import connect
from tests.support.servers import FIXTURES, REPO, Appliance, PetstoreUpstream, cli, running_appliance

pytestmark = pytest.mark.e2e
SPEC: dict[str, Any] = yaml.safe_load((FIXTURES / "oai-v3.0-petstore.yaml").read_text())
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
IMPORTS_PER_HOUR = 3


@dataclasses.dataclass
class World:
    app: Appliance
    upstream: PetstoreUpstream
    keys: dict[str, str]  # alice, bob (users), a1, b1 (their agents)
    agents: dict[str, int]
    grants: dict[str, int]


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def as_key(app: Appliance, key: str) -> Appliance:
    return dataclasses.replace(app, key=key)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    # Access, not spend, is under test here: calls to other users' toolkits cost nothing.
    env = {
        "TOOLSPOKE_IMPORTS_PER_HOUR": str(IMPORTS_PER_HOUR),
        "TOOLSPOKE_DEMO": "0",
        "TOOLSPOKE_DEFAULT_FEE": "0",
    }
    with (
        PetstoreUpstream() as upstream,
        running_appliance(tmp_path_factory.mktemp("access") / "data", env=env) as app,
    ):
        keys: dict[str, str] = {}
        agents: dict[str, int] = {}
        grants: dict[str, int] = {}
        with api(app) as admin:
            for user in ("alice", "bob"):
                uid = ok(admin.post("/api/v1/users", json={"name": user}), 201)["id"]
                keys[user] = ok(admin.post("/api/v1/keys", json={"user_id": uid, "name": "own"}), 201)["key"]
        imports = [("alice", "pets", "default"), ("alice", "pets", "team"), ("bob", "bobpets", "default")]
        for user, slug, project in imports:
            with api(app, keys[user]) as client:
                body = {"slug": slug, "project": project, "spec": SPEC, "base_url": upstream.base_url}
                ok(client.post("/api/v1/toolkits/openapi", json=body), 201)
        for user, agent, slug, tools in (
            ("alice", "a1", "pets", []),
            ("bob", "b1", "bobpets", ["bobpets__listPets"]),
        ):
            with api(app, keys[user]) as client:
                agents[agent] = ok(client.post("/api/v1/agents", json={"name": agent}), 201)["id"]
                keys[agent] = ok(client.post("/api/v1/keys", json={"agent_id": agents[agent]}), 201)["key"]
                grant = {"agent_id": agents[agent], "toolkit": slug, "tools": tools}
                grants[agent] = ok(client.post("/api/v1/grants", json=grant), 201)["id"]
        yield World(app, upstream, keys, agents, grants)


async def _search(client: Any, query: str = "pets") -> set[str]:
    found = await client.call_tool("search_tools", {"query": query, "limit": 50})
    return {r["name"] for r in found.structured_content["results"]}


def test_two_agents_of_two_users_each_see_and_call_only_their_own_grants(world: World) -> None:
    async def scenario() -> None:
        async with connect(as_key(world.app, world.keys["a1"])) as a1:
            assert await _search(a1) == {"pets__listPets", "pets__createPets", "pets__showPetById"}
            kits = (await a1.call_tool("list_toolkits", {})).structured_content["toolkits"]
            assert [(k["project"], k["toolkit"]) for k in kits] == [("default", "pets")]
            listed = await a1.call_tool("use_tool", {"tool": "pets__listPets", "input": {"limit": 1}})
            assert listed.is_error is False
            assert json.loads(listed.content[0].text) == [{"id": 1, "name": "Rex", "tag": "dog"}]
            theirs = await a1.call_tool("use_tool", {"tool": "bobpets__listPets", "input": {}})
            # A ghost of the same shape (did-you-mean depends on the spelling asked for, and
            # draws on a1's visible names alone): the hidden tool answers exactly like it.
            ghost = await a1.call_tool("use_tool", {"tool": "bobpetz__listPets", "input": {}})
            assert theirs.is_error and ghost.is_error
            assert theirs.content[0].text.replace("bobpets__listPets", "X") == ghost.content[0].text.replace(
                "bobpetz__listPets", "X"
            )
            assert theirs.meta == ghost.meta
            assert theirs.meta["toolspoke/suggestions"] == ["pets__listPets"]  # a1's own, not bob's
            nothing = await a1.call_tool("use_tool", {"tool": "nothing__here", "input": {}})
            assert "toolspoke/suggestions" not in (nothing.meta or {})
        async with connect(as_key(world.app, world.keys["b1"])) as b1:
            assert await _search(b1) == {"bobpets__listPets"}  # a grant of one tool shows one tool
            before = len(world.upstream.requests)
            refused = await b1.call_tool(
                "use_tool", {"tool": "bobpets__showPetById", "input": {"petId": "1"}}
            )
            assert refused.is_error and refused.meta["toolspoke/reason"] == "tool_not_found"
            assert len(world.upstream.requests) == before  # nothing left the gateway
            described = (
                await b1.call_tool("describe_tools", {"names": ["pets__listPets"]})
            ).structured_content
            assert described == {"tools": [], "unknown": ["pets__listPets"]}
            with pytest.raises(MCPError) as direct:
                await b1.call_tool("pets__listPets", {})
            with pytest.raises(MCPError) as missing:
                await b1.call_tool("petz__listPets", {})  # a ghost of the same shape
            assert direct.value.error.code == missing.value.error.code == -32602
            assert direct.value.error.message.replace(
                "'pets__listPets'", "X"
            ) == missing.value.error.message.replace("'petz__listPets'", "X")
            assert direct.value.error.data["suggestions"] == ["bobpets__listPets"]  # b1's, not a1's

    run(scenario())


def test_revoking_a_grant_or_a_key_takes_effect_on_the_next_call(world: World) -> None:
    app = world.app
    with api(app, world.keys["alice"]) as alice:
        key = ok(alice.post("/api/v1/keys", json={"agent_id": world.agents["a1"], "name": "short"}), 201)
        spare = ok(alice.post("/api/v1/agents", json={"name": "spare"}), 201)["id"]
        grant = ok(alice.post("/api/v1/grants", json={"agent_id": spare, "toolkit": "pets"}), 201)["id"]
        spare_key = ok(alice.post("/api/v1/keys", json={"agent_id": spare}), 201)["key"]

        async def scenario() -> None:
            async with connect(as_key(app, spare_key)) as client:
                first = await client.call_tool("use_tool", {"tool": "pets__listPets", "input": {}})
                assert first.is_error is False
                ok(alice.delete(f"/api/v1/grants/{grant}"))
                second = await client.call_tool("use_tool", {"tool": "pets__listPets", "input": {}})
                assert second.is_error and second.meta["toolspoke/reason"] == "tool_not_found"
                assert await _search(client) == set()
            async with connect(as_key(app, key["key"])) as client:
                assert (
                    await client.call_tool("use_tool", {"tool": "pets__listPets", "input": {}})
                ).is_error is False
                revoked = ok(alice.delete(f"/api/v1/keys/{key['prefix']}"))
                assert revoked["revoked_at"] is not None
                with pytest.raises(Exception) as refused:  # the SDK surfaces the HTTP 401
                    await client.call_tool("use_tool", {"tool": "pets__listPets", "input": {}})
                assert "401" in repr(refused.value) or "nauthori" in repr(refused.value)

        run(scenario())
    with api(app, key["key"]) as gone:
        assert gone.post("/mcp", json=INIT).status_code == 401


def test_a_tool_in_two_visible_projects_is_refused_listing_both_until_project_names_one(world: World) -> None:
    async def scenario() -> None:
        async with connect(as_key(world.app, world.keys["alice"])) as alice:
            with pytest.raises(MCPError) as ambiguous:
                await alice.call_tool("pets__listPets", {})
            assert ambiguous.value.error.code == -32602
            assert ambiguous.value.error.data["projects"] == ["default", "team"]
            before = len(world.upstream.requests)
            runner = await alice.call_tool("use_tool", {"tool": "pets__listPets", "input": {}})
            assert runner.is_error and runner.meta["toolspoke/projects"] == ["default", "team"]
            assert len(world.upstream.requests) == before  # nothing ran
            chosen = await alice.call_tool(
                "use_tool", {"tool": "pets__listPets", "project": "team", "input": {}}
            )
            assert chosen.is_error is False
            assert len(world.upstream.requests) == before + 1
            guide = await alice.call_tool("read_guide", {"toolkit": "pets"})
            assert guide.is_error and "default, team" in guide.content[0].text

    run(scenario())


def test_a_published_toolkit_lists_its_tools_without_a_key_but_calling_needs_one(world: World) -> None:
    app = world.app
    with httpx.Client(base_url=app.base_url, timeout=30) as anonymous:
        # private: without a key it answers exactly like a toolkit that does not exist
        assert anonymous.post("/mcp/bobpets", json=INIT).status_code == 401
        assert anonymous.post("/mcp/nosuchkit", json=INIT).status_code == 401
        with api(app, world.keys["bob"]) as bob:
            ok(bob.patch("/api/v1/toolkits/bobpets/access", json={"visibility": "published"}))
        opened = anonymous.post("/mcp/bobpets", json=INIT)
        assert opened.status_code == 200, opened.text
        headers = {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        listed = anonymous.post(
            "/mcp/bobpets", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers
        )
        assert {t["name"] for t in listed.json()["result"]["tools"]} == {
            "listPets",
            "createPets",
            "showPetById",
        }
        before = len(world.upstream.requests)
        call = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "listPets", "arguments": {}},
        }
        refused = anonymous.post("/mcp/bobpets", json=call, headers=headers)
        assert refused.status_code == 401 and "WWW-Authenticate" in refused.headers
        assert len(world.upstream.requests) == before

    # any user's key may call a published toolkit; an agent still needs a grant
    async def scenario() -> None:
        async with connect(as_key(app, world.keys["alice"]), "/mcp/bobpets") as alice:
            assert (await alice.call_tool("listPets", {})).is_error is False
        async with connect(as_key(app, world.keys["a1"])) as a1:
            assert "bobpets__listPets" not in await _search(a1)

    run(scenario())
    with api(app, world.keys["bob"]) as bob:
        ok(bob.patch("/api/v1/toolkits/bobpets/access", json={"visibility": "private"}))


def test_preloaded_tools_are_listed_beside_the_bridge_and_callable_by_name_but_never_widen(
    world: World,
) -> None:
    with api(world.app, world.keys["alice"]) as alice:
        preload = ["pets__showPetById", "bobpets__listPets"]
        ok(alice.patch(f"/api/v1/agents/{world.agents['a1']}", json={"preload": preload}))

    async def scenario() -> None:
        async with connect(as_key(world.app, world.keys["a1"])) as a1:
            names = {t.name for t in (await a1.list_tools()).tools}
            assert "pets__showPetById" in names and "bobpets__listPets" not in names
            shown = await a1.call_tool("pets__showPetById", {"petId": "2"})
            assert shown.structured_content == {"id": 2, "name": "Tom", "tag": "cat"}

    run(scenario())


def test_agent_keys_cannot_use_the_admin_api_and_users_see_only_their_own(world: World) -> None:
    with api(world.app, world.keys["a1"]) as agent:
        assert agent.get("/api/v1/agents").status_code == 403
        assert agent.get("/api/v1/toolkits").status_code == 403
    with api(world.app, world.keys["bob"]) as bob:
        assert [a["name"] for a in ok(bob.get("/api/v1/agents"))["agents"]] == ["b1"]
        assert bob.get(f"/api/v1/agents/{world.agents['a1']}").status_code == 404
        assert bob.get(f"/api/v1/grants/{world.grants['a1']}").status_code == 404
        assert bob.get("/api/v1/users").status_code == 403
        # a grant on a toolkit bob cannot reach reads as a toolkit that does not exist
        r = bob.post("/api/v1/grants", json={"agent_id": world.agents["b1"], "toolkit": "pets"})
        assert r.status_code == 404 and r.json()["error"]["field"] == "toolkit"
        assert bob.patch("/api/v1/toolkits/pets/access", json={"visibility": "published"}).status_code == 404
        r = bob.patch("/api/v1/toolkits/bobpets/access", json={"default": True})
        assert r.status_code == 403 and r.json()["error"]["field"] == "default"
        r = bob.post("/api/v1/agents", json={"name": "x", "colour": "red"})
        assert r.status_code == 422 and r.json()["error"]["field"] == "colour"
        # an owner reviews their own toolkit's pending tools; another user's reads as absent
        assert ok(bob.get("/api/v1/toolkits/bobpets/pending"))["pending"] == []
        assert bob.get("/api/v1/toolkits/pets/pending").status_code == 404
        assert bob.post("/api/v1/tools/bobpets__listPets/kind", json={"kind": "write"}).status_code == 403


def test_the_hourly_import_limit_refuses_with_the_seconds_to_wait(world: World) -> None:
    body = {"slug": "more", "spec": SPEC, "base_url": world.upstream.base_url}
    with api(world.app, world.keys["alice"]) as alice:  # alice has used 2 of 3
        ok(alice.post("/api/v1/toolkits/openapi", json=body), 201)
        refused = alice.post("/api/v1/toolkits/openapi", json={**body, "slug": "evenmore"})
        assert refused.status_code == 429
        error = refused.json()["error"]
        assert error["reason"] == "rate_limited" and 3000 < error["retry_after_s"] <= 3600
        assert refused.headers["Retry-After"] == str(error["retry_after_s"])
        assert "evenmore" not in {k["toolkit"] for k in ok(alice.get("/api/v1/toolkits"))["toolkits"]}
    with api(world.app, world.keys["bob"]) as bob:  # per user: bob is not held back by alice
        ok(bob.post("/api/v1/toolkits/openapi", json={**body, "slug": "bobmore"}), 201)


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
