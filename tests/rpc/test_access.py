"""Who may see and call what, in process (tests/support/inprocess.py): the official SDK
client on /mcp and plain httpx on the admin API, against a real upstream.

The two users' world is tests/support/access_world.py. Moved from tests/e2e/test_access.py,
which keeps this path on a real ``toolspoke serve`` (an agent's grants over the legacy SSE
face and the stdio face, and the CLI acting for a key).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from tests.support.access_world import ENV, SPEC, World, api, ok, populate
from tests.support.accounts import as_key, run
from tests.support.clients import INIT, connect
from tests.support.inprocess import InProcess, served_in_process
from tests.support.servers import PetstoreUpstream

pytestmark = pytest.mark.inprocess


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with (
        PetstoreUpstream() as upstream,
        served_in_process(tmp_path_factory.mktemp("access") / "data", env=ENV) as app,
    ):
        yield populate(app, upstream)


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
    assert isinstance(app, InProcess)
    with app.client(timeout=30) as anonymous:
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
