"""``import … --replace`` is a re-sync from the fresh import, by CLI and admin API.

A real appliance and a real SDK upstream (``tests/support/dynamic_upstream.py``) whose tool
set the test changes between imports; the official SDK client through the bridge checks what
agents see. Unchanged tools keep their approval and the owner's kind; changed ones are pending
again; vanished ones are disabled; a returning one is pending.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_mcp_resync import admin, ok, run
from tests.support.clients import connect
from tests.support.resync import EVERYWHERE, NOWHERE, dynamic_upstream, outcome, visible
from tests.support.servers import Appliance, cli, running_appliance

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    # Access, not spend, is under test: an agent's calls cost nothing here.
    env = {"TOOLSPOKE_DEFAULT_FEE": "0"}
    with running_appliance(tmp_path_factory.mktemp("replace") / "data", env=env) as running:
        yield running


def cli_import(app: Appliance, url: str, slug: str, *extra: str) -> dict[str, Any]:
    env = {"ALLOWED_TOOL_CIDRS": "127.0.0.1/32"}
    done = cli(app.data_dir, "import", "mcp", "--json", url, "--slug", slug, *extra, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_an_mcp_replace_keeps_approvals_kinds_and_grants_of_unchanged_tools_and_resyncs_the_rest(
    app: Appliance, tmp_path: Path
) -> None:
    with dynamic_upstream(tmp_path, ["alpha", "beta", "gamma"]) as up, admin(app) as api:
        assert cli_import(app, up.url, "rep")["tool_count"] == 3
        assert ok(api.post("/tools/rep__beta/kind", json={"kind": "write"}))["runner"] == "run_tool"
        # An agent granted beta alone (a grant of selected tools).
        agent = api.post("/agents", json={"name": "rep-agent"}).raise_for_status().json()["id"]
        agent_key = api.post("/keys", json={"agent_id": agent}).raise_for_status().json()["key"]
        grant = {"agent_id": agent, "toolkit": "rep", "tools": ["rep__beta"]}
        assert api.post("/grants", json=grant).status_code == 201
        as_agent = dataclasses.replace(app, key=agent_key)

        up.set(["alpha", "beta"], alpha_v2=True)  # alpha changed, beta unchanged, gamma gone
        report = cli_import(app, up.url, "rep", "--replace")
        assert report["replaced"] is True
        assert report["changes"] == {
            "added": [],
            "changed": ["rep__alpha"],
            "removed": ["rep__gamma"],
            "returned": [],
            "unchanged": 1,
            "pending": ["rep__alpha"],
        }

        async def after_cli() -> None:
            async with connect(app) as client:
                # beta: still approved, still the owner's "write" (run_tool, not use_tool).
                assert await outcome(client, "run_tool", {"tool": "rep__beta", "input": {"text": "ab"}}) == (
                    False,
                    "beta:ba",
                )
                refused = await outcome(client, "use_tool", {"tool": "rep__beta", "input": {"text": "ab"}})
                assert refused[0] and "run_tool" in refused[1]
                assert await visible(client, "rep__alpha", "echo text", "rep") == NOWHERE  # pending
                assert await visible(client, "rep__gamma", "count the characters", "rep") == NOWHERE

        run(after_cli())

        async def agent_after_cli() -> None:
            async with connect(as_agent) as client:  # the grant of beta alone still stands
                assert await outcome(client, "run_tool", {"tool": "rep__beta", "input": {"text": "x"}}) == (
                    False,
                    "beta:x",
                )
                found = (
                    await client.call_tool("search_tools", {"query": "text", "toolkit": "rep"})
                ).structured_content
                assert {r["name"] for r in found["results"]} == {"rep__beta"}

        run(agent_after_cli())
        pending = ok(api.get("/toolkits/rep/pending"))["pending"]
        assert [p["name"] for p in pending] == ["rep__alpha"]
        assert "loud" in pending[0]["input_schema"]["properties"]  # the new definition is stored

        # The admin API's replace: gamma returns (pending), alpha stays pending, beta stays.
        up.set(["alpha", "beta", "gamma"], alpha_v2=True)
        body = {"slug": "rep", "url": up.url, "replace": True}
        done = api.post("/toolkits/mcp", json=body)
        assert done.status_code == 201, done.text
        changes = done.json()["changes"]
        assert (changes["returned"], changes["changed"], changes["unchanged"]) == (["rep__gamma"], [], 2)
        assert changes["pending"] == ["rep__alpha", "rep__gamma"]
        assert ok(api.post("/toolkits/rep/approve", json={"all": True}))["approved"] == [
            "rep__alpha",
            "rep__gamma",
        ]

        async def approved() -> None:
            async with connect(app) as client:
                assert (
                    await visible(client, "rep__gamma", "count the characters of text", "rep") == EVERYWHERE
                )
                loud = await outcome(
                    client, "use_tool", {"tool": "rep__alpha", "input": {"text": "a", "loud": True}}
                )
                assert loud == (False, "alpha:A")
                beta = (await client.call_tool("describe_tools", {"names": ["rep__beta"]})).structured_content
                assert beta["tools"][0]["runner"] == "run_tool"

        run(approved())
