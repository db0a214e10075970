"""The bridge's answers as an agent reads them, on a real database: list_toolkits with short
names (and its brief form by domain), search results with compact schemas folded into one
``defs``, describe_tools in full; the text block always the structuredContent's JSON."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from appliance import config
from appliance.gateway import bridge
from appliance.gateway.imports import import_openapi
from appliance.gateway.runtime import Runtime
from appliance.models import CallResult, Principal
from tests.support.servers import FIXTURES

OPERATOR = Principal(user_id=0, name="operator", is_admin=True, key_prefix="", operator=True)
SPECS = {"pets": "swagger-petstore-v3-openapi.yaml", "gotify": "gotify-spec.json"}


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every answer the tests look at, from one appliance (the imports are the slow part)."""
    data = tmp_path_factory.mktemp("answers") / "data"
    settings = config.load(cli={"data_dir": str(data)}, env={})

    async def main() -> dict[str, Any]:
        rt = Runtime(settings)
        await rt.open()
        try:
            for slug, spec in SPECS.items():
                await import_openapi(rt, str(FIXTURES / spec), slug=slug, base_url="https://api.example.com")

            async def call(name: str, args: dict[str, Any]) -> CallResult:
                return await bridge.call_bridge(rt, OPERATOR, name, args)

            out: dict[str, Any] = {
                "index": await call("list_toolkits", {}),
                "brief": await call("list_toolkits", {"brief": True, "toolkit": "gotify"}),
                "search": await call("search_tools", {"query": "create an application", "limit": 5}),
                "grouped": await call(
                    "search_tools",
                    {"queries": [{"use_case": "add a pet"}, {"use_case": "update an application"}]},
                ),
            }
            top = out["search"].structured["results"][0]["name"]
            out["described"] = await call("describe_tools", {"names": [top]})
            out["full_names"] = await bridge.list_toolkits(rt, OPERATOR)
            return out
        finally:
            await rt.close()

    return asyncio.run(main())


def _same_in_both(result: CallResult) -> dict[str, Any]:
    assert [c["type"] for c in result.content] == ["text"]
    assert json.loads(result.content[0]["text"]) == result.structured  # one answer, two encodings
    assert isinstance(result.structured, dict)
    return result.structured


def test_list_toolkits_gives_names_without_the_prefix_and_the_rule_to_call_them(
    answers: dict[str, Any],
) -> None:
    index = _same_in_both(answers["index"])
    kits = {k["toolkit"]: k for k in index["toolkits"]}
    assert set(kits) >= set(SPECS)
    full = {k["toolkit"]: k["tools"] for k in answers["full_names"]}
    for slug, kit in kits.items():
        assert all("__" not in n for n in kit["tools"]), slug
        assert [f"{slug}__{n}" for n in kit["tools"]] == full[slug]  # the exact callable names
        assert set(kit) == {"toolkit", "project", "title", "health", "has_guide", "tools"}
    assert "addPet" in kits["pets"]["tools"]
    listed = next(t for t in bridge.PUBLISHED if t["name"] == "list_toolkits")
    assert "<toolkit>__<name>" in listed["description"]


def test_the_brief_listing_groups_one_line_per_tool_by_domain(answers: dict[str, Any]) -> None:
    brief = _same_in_both(answers["brief"])
    [kit] = brief["toolkits"]  # toolkit narrows it
    assert kit["toolkit"] == "gotify"
    domains = kit["domains"]
    assert "application" in domains and "message" in domains  # the spec's tags
    assert domains["application"]["createApp"] == "Create an application."
    lines = [line for tools in domains.values() for line in tools.values()]
    assert len(lines) == len(next(k for k in answers["full_names"] if k["toolkit"] == "gotify")["tools"])
    assert all(0 < len(line) <= 80 for line in lines)


def test_search_results_are_compact_and_fold_what_they_share(answers: dict[str, Any]) -> None:
    found = _same_in_both(answers["search"])
    first = found["results"][0]
    assert set(first) == {"name", "project", "kind", "runner", "health", "version", "description", "input"}
    assert (first["name"], first["kind"], first["runner"]) == ("gotify__createApp", "write", "run_tool")
    # the application body is shared with updateApplication: once, in defs
    assert first["input"]["properties"]["body"]["$ref"] == "#/defs/body"
    body = found["defs"]["body"]
    assert body["required"] == ["name"]
    assert body["properties"]["name"] == "string: The application name."
    grouped = _same_in_both(answers["grouped"])
    assert [g["use_case"] for g in grouped["groups"]] == ["add a pet", "update an application"]
    text = json.dumps(grouped["groups"], separators=(",", ":"))
    assert ('"$ref":"#/defs/' in text) == ("defs" in grouped)  # defs sit once, beside the groups
    assert all("defs" not in g for g in grouped["groups"])


def test_describe_tools_gives_the_full_schema_the_search_shortened(answers: dict[str, Any]) -> None:
    described = _same_in_both(answers["described"])
    [tool] = described["tools"]
    schema = tool["input_schema"]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    body = schema["properties"]["body"]
    assert body["type"] == "object" and "$ref" not in json.dumps(schema)
    assert set(body["properties"]) >= {"name", "description", "defaultPriority"}
    assert len(json.dumps(described)) > len(json.dumps(answers["search"].structured["results"][0]))


def test_tools_list_stays_within_its_token_budget_and_keeps_the_runner_hints() -> None:
    listed = json.dumps({"tools": bridge.PUBLISHED}, separators=(",", ":"), ensure_ascii=False).encode()
    assert len(listed) / 4 <= 700, len(listed)
    hints = {t["name"]: t["annotations"] for t in bridge.PUBLISHED}
    assert hints["use_tool"]["readOnlyHint"] is True
    assert hints["run_tool"]["destructiveHint"] is False and not hints["run_tool"].get("readOnlyHint")
    assert hints["run_destructive_tool"]["destructiveHint"] is True
    assert all(
        hints[n]["readOnlyHint"] for n in ("search_tools", "list_toolkits", "describe_tools", "read_guide")
    )
    # the published schemas leave out what only guards the appliance; the enforced ones keep it
    search = next(t for t in bridge.BRIDGE_TOOLS if t["name"] == "search_tools")["inputSchema"]
    shown = next(t for t in bridge.PUBLISHED if t["name"] == "search_tools")["inputSchema"]
    assert search["additionalProperties"] is False and "additionalProperties" not in shown
    assert set(shown["properties"]) == set(search["properties"])
