"""The agent's loop end to end: a real SDK client, a real appliance, a real HTTP upstream.

initialize → tools/list (bridge only) → search_tools → describe_tools → use_tool, then
checks that the upstream received exactly the request the tool call implies.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from tests.support.clients import connect, inspector
from tests.support.servers import FIXTURES, Appliance, PetstoreUpstream, cli, running_appliance

pytestmark = pytest.mark.e2e
BRIDGE = {
    "search_tools",
    "list_toolkits",
    "describe_tools",
    "read_guide",
    "read_result",
    "use_tool",
    "run_tool",
    "run_destructive_tool",
}
PETSTORE = FIXTURES / "oai-v3.0-petstore.yaml"


@pytest.fixture(scope="module")
def upstream() -> Iterator[PetstoreUpstream]:
    with PetstoreUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, upstream: PetstoreUpstream) -> Iterator[Appliance]:
    data = tmp_path_factory.mktemp("loop") / "data"
    with running_appliance(data) as running:
        done = cli(
            data,
            "import",
            "openapi",
            str(PETSTORE),
            "--slug",
            "petstore",
            "--base-url",
            upstream.base_url,
            env={"ALLOWED_TOOL_CIDRS": "127.0.0.1/32"},
        )
        assert done.returncode == 0, done.stderr
        yield running


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def structured(result: Any) -> Any:
    assert result.is_error is False, result
    return result.structured_content


@pytest.mark.parametrize(("mode", "era"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
def test_an_sdk_client_searches_describes_and_uses_a_tool_and_the_upstream_sees_the_request(
    app: Appliance, upstream: PetstoreUpstream, mode: str, era: str
) -> None:
    async def scenario() -> None:
        async with connect(app, mode=mode) as client:
            # SDK 2.x speaks the stateless revision without falling back; a legacy
            # (handshake) client still works on the same endpoint.
            assert client.session.protocol_version == era
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == BRIDGE
            found = structured(await client.call_tool("search_tools", {"query": "list all pets"}))
            first = found["results"][0]
            assert first["name"] == "petstore__listPets"
            assert (first["runner"], first["kind"], first["health"]) == ("use_tool", "read", "active")
            # compact: a plain argument reads "type: its first sentence"; describe_tools has it all
            assert first["input"]["properties"]["limit"].startswith("integer: How many items to return")
            described = structured(
                await client.call_tool(
                    "describe_tools", {"names": ["petstore__listPets", "petstore__createPets"]}
                )
            )
            assert [t["name"] for t in described["tools"]] == ["petstore__listPets", "petstore__createPets"]
            limit = described["tools"][0]["input_schema"]["properties"]["limit"]
            assert limit["type"] == "integer" and limit["maximum"] == 100
            assert described["tools"][0]["toolkit"] == "petstore"
            before = len(upstream.requests)
            result = await client.call_tool("use_tool", {"tool": "petstore__listPets", "input": {"limit": 1}})
            assert result.is_error is False
            assert json.loads(result.content[0].text) == [{"id": 1, "name": "Rex", "tag": "dog"}]
            sent = upstream.requests[before:]
            assert len(sent) == 1
            assert (sent[0].method, sent[0].path, sent[0].query) == ("GET", "/v1/pets", {"limit": ["1"]})
            assert "authorization" not in sent[0].headers  # the agent's key never goes upstream

    run(scenario())


def test_a_tool_sent_to_the_wrong_runner_is_refused_naming_the_right_one_and_nothing_runs(
    app: Appliance, upstream: PetstoreUpstream
) -> None:
    async def scenario() -> None:
        async with connect(app) as client:
            before = len(upstream.requests)
            result = await client.call_tool("run_tool", {"tool": "petstore__listPets", "input": {}})
            assert result.is_error is True
            assert "use_tool" in result.content[0].text
            assert result.meta["toolspoke/reason"] == "wrong_runner"
            assert result.meta["toolspoke/runner"] == "use_tool"
            result = await client.call_tool(
                "run_destructive_tool",
                {"tool": "petstore__createPets", "input": {"body": {"id": 3, "name": "x"}}},
            )
            assert result.is_error is True and "run_tool" in result.content[0].text
            assert len(upstream.requests) == before

    run(scenario())


def test_a_client_that_knows_the_exact_name_may_call_it_directly(
    app: Appliance, upstream: PetstoreUpstream
) -> None:
    async def scenario() -> None:
        async with connect(app) as client:
            result = await client.call_tool("petstore__showPetById", {"petId": "2"})
            assert structured(result) == {"id": 2, "name": "Tom", "tag": "cat"}
            assert upstream.requests[-1].path == "/v1/pets/2"
            created = await client.call_tool(
                "run_tool", {"tool": "petstore__createPets", "input": {"body": {"id": 9, "name": "Kit"}}}
            )
            assert created.is_error is False
            assert json.loads(upstream.requests[-1].body) == {"id": 9, "name": "Kit"}

    run(scenario())


def test_a_bad_argument_is_refused_naming_the_field_and_nothing_is_sent(
    app: Appliance, upstream: PetstoreUpstream
) -> None:
    async def scenario() -> None:
        async with connect(app) as client:
            before = len(upstream.requests)
            via_runner = await client.call_tool(
                "use_tool", {"tool": "petstore__listPets", "input": {"limit": "x"}}
            )
            assert via_runner.is_error is True and "/limit" in via_runner.content[0].text
            direct = await client.call_tool("petstore__showPetById", {})
            assert direct.is_error is True and "/petId" in direct.content[0].text  # 2025-11-25: isError
            too_big = await client.call_tool(
                "use_tool", {"tool": "petstore__listPets", "input": {"limit": 101}}
            )
            assert too_big.is_error is True and "/limit" in too_big.content[0].text
            assert len(upstream.requests) == before

    run(scenario())


def test_argument_errors_put_the_reason_first_and_list_every_error_through_mcp(app: Appliance) -> None:
    async def scenario() -> None:
        async with connect(app) as client:
            bad = {"body": {"title": "x" * 50_000, "body": 5, "tags": ["ok", 7]}}
            result = await client.call_tool("run_tool", {"tool": "demo__createNote", "input": bad})
            assert result.is_error is True
            text = result.content[0].text
            assert text.startswith("3 invalid arguments: ")
            assert "/body/title: must be at most 200 characters, got 50000" in text
            assert "/body/body: must be string, got integer 5" in text
            assert "/body/tags/1: must be string, got integer 7" in text
            assert len(text) < 500
            meta = result.meta or {}
            assert meta["toolspoke/reason"] == "arguments_invalid"
            assert meta["toolspoke/error_count"] == 3
            paths = {e["path"] for e in meta["toolspoke/errors"]}
            assert paths == {"/body/title", "/body/body", "/body/tags/1"}

    run(scenario())


def test_a_2025_06_18_client_gets_argument_errors_as_32602_with_the_path(app: Appliance) -> None:
    import httpx

    headers = {"Authorization": f"Bearer {app.key}", "Accept": "application/json"}
    with httpx.Client(headers=headers, timeout=30) as http:
        r = http.post(
            app.mcp_url,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "old", "version": "1"},
                },
            },
        )
        session = {"Mcp-Session-Id": r.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-06-18"}
        r = http.post(
            app.mcp_url,
            headers=session,
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "petstore__showPetById", "arguments": {"petId": 5}},
            },
        )
        err = r.json()["error"]
        assert err["code"] == -32602
        assert err["data"]["path"] == "/petId"


def test_an_unknown_tool_called_directly_is_a_32602_protocol_error(app: Appliance) -> None:
    async def scenario() -> None:
        async with connect(app) as client:
            with pytest.raises(MCPError) as err:
                await client.call_tool("petstore__noSuchThing", {})
            assert err.value.error.code == -32602

    run(scenario())


def test_list_toolkits_names_every_tool_without_schemas(app: Appliance) -> None:
    async def scenario() -> None:
        async with connect(app) as client:
            result = await client.call_tool("list_toolkits", {})
            kits = structured(result)["toolkits"]
            assert json.loads(result.content[0].text) == {"toolkits": kits}  # one answer, both forms
            pet = next(k for k in kits if k["toolkit"] == "petstore")
            assert pet["project"] == "default"
            # without the prefix: the callable name is <toolkit>__<name>
            assert sorted(pet["tools"]) == ["createPets", "listPets", "showPetById"]
            assert "input_schema" not in json.dumps(kits)
            brief = structured(
                await client.call_tool("list_toolkits", {"toolkit": "petstore", "brief": True})
            )
            [kit] = brief["toolkits"]
            assert kit["domains"] == {
                "pets": {
                    "createPets": "Create a pet",
                    "listPets": "List all pets",
                    "showPetById": "Info for a specific pet",
                }
            }

    run(scenario())


def test_the_demo_toolkit_works_with_no_configuration(app: Appliance) -> None:
    async def scenario() -> None:
        async with connect(app) as client:
            found = structured(await client.call_tool("search_tools", {"query": "write a new note"}))
            assert found["results"][0]["name"] == "demo__createNote"
            made = structured(
                await client.call_tool(
                    "run_tool",
                    {"tool": "demo__createNote", "input": {"body": {"title": "hello", "tags": ["t"]}}},
                )
            )
            got = structured(
                await client.call_tool("use_tool", {"tool": "demo__getNote", "input": {"noteId": made["id"]}})
            )
            assert got["title"] == "hello"
            gone = await client.call_tool(
                "run_destructive_tool", {"tool": "demo__deleteNote", "input": {"noteId": made["id"]}}
            )
            assert gone.is_error is False
            missing = await client.call_tool(
                "use_tool", {"tool": "demo__getNote", "input": {"noteId": made["id"]}}
            )
            assert missing.is_error is True and missing.meta["toolspoke/status"] == 404
            guide = structured(await client.call_tool("read_guide", {"toolkit": "demo"}))
            assert "notes" in guide["guide"]

    run(scenario())


def test_the_mcp_inspector_cli_lists_the_bridge_tools(app: Appliance) -> None:
    result = inspector(app, "/mcp", "http", "--method", "tools/list")
    assert {t["name"] for t in result["tools"]} == BRIDGE


def test_a_bad_spec_is_refused_with_a_reason_and_stores_nothing(tmp_path: Path, app: Appliance) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("openapi: 3.0.0\ninfo: {title: x, version: '1'}\npaths: [1, 2]\n")
    before = cli(app.data_dir, "toolkits", "--json")
    done = cli(
        app.data_dir, "import", "openapi", str(bad), "--slug", "broken", "--base-url", "https://x.example"
    )
    assert done.returncode == 1
    assert "paths" in done.stderr
    assert "Traceback" not in done.stderr
    assert cli(app.data_dir, "toolkits", "--json").stdout == before.stdout
    garbage = tmp_path / "garbage.json"
    garbage.write_text('{"openapi": "3.0.0", ')
    done = cli(app.data_dir, "import", "openapi", str(garbage), "--slug", "broken2")
    assert done.returncode == 1 and "JSON" in done.stderr
    assert cli(app.data_dir, "toolkits", "--json").stdout == before.stdout
