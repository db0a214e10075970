"""search_tools as agents call it, on a real database: one query, grouped use cases,
known_fields, providers and tags filters, and arguments refused with the field named."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from appliance import config
from appliance.errors import ArgumentsInvalid, InvalidParams
from appliance.gateway.agent_search import parse_known_fields, search_for_agent
from appliance.gateway.answers import fold_search, result
from appliance.gateway.bridge import BRIDGE_TOOLS
from appliance.gateway.imports import import_catalog
from appliance.gateway.runtime import Runtime
from appliance.gateway.validation import validate_arguments
from appliance.search.text import MAX_QUERY_CHARS

TOOLS = [
    # (catalogue toolkit = group, name, description, input properties)
    ("weather", "forecast_by_city", "Weather forecast for the next days.", ["city"]),
    ("weather", "forecast_by_coordinates", "Weather forecast for the next days.", ["lat", "lon"]),
    ("mail", "send_mail", "Send an email message to someone.", ["to", "subject", "body"]),
    ("calendar", "create_event", "Create a calendar event.", ["title", "start"]),
]


def search(
    tmp_path: Path, args: dict[str, Any], *, can_install: bool = False, slug: str = "other"
) -> dict[str, Any]:
    tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))  # a fresh appliance per call
    lines = [
        json.dumps(
            {
                "toolkit": k,
                "name": n,
                "description": d,
                "input_schema": {"type": "object", "properties": {p: {"type": "string"} for p in ps}},
            }
        )
        for k, n, d, ps in TOOLS
    ]
    source = tmp_path / "c.jsonl"
    source.write_text("\n".join(lines) + "\n")
    settings = config.load(cli={"data_dir": str(tmp_path / "data")}, env={})

    async def main() -> dict[str, Any]:
        rt = Runtime(settings)
        await rt.open()
        try:
            await import_catalog(rt, str(source), slug="kit")
            await import_catalog(rt, str(source), slug=slug)
            spec = next(t for t in BRIDGE_TOOLS if t["name"] == "search_tools")
            validate_arguments(spec["inputSchema"], args)
            return fold_search(await search_for_agent(rt, args, result, can_install=can_install))
        finally:
            await rt.close()

    return asyncio.run(main())


def test_one_query_answers_a_flat_list_with_versions_and_the_ranking(tmp_path: Path) -> None:
    out = search(tmp_path, {"query": "send an email", "providers": ["kit"]})
    assert out["ranking"] == "lexical"
    first = out["results"][0]
    assert first["name"] == "kit__mail_send_mail"
    # compact: the toolkit is the name's prefix; the input keeps every argument, tersely
    assert set(first) == {"name", "project", "kind", "runner", "version", "description", "input", "health"}
    assert (first["kind"], first["runner"], first["health"]) == (
        "read",
        "use_tool",
        "active",
    )  # catalogue default
    assert first["input"] == {"properties": {"to": "string", "subject": "string", "body": "string"}}
    assert len(first["version"]) == 12


def test_several_use_cases_come_back_grouped_in_order(tmp_path: Path) -> None:
    out = search(
        tmp_path,
        {"queries": [{"use_case": "weather forecast"}, {"use_case": "create a calendar event"}], "limit": 2},
    )
    groups = out["groups"]
    assert [g["use_case"] for g in groups] == ["weather forecast", "create a calendar event"]
    assert all(len(g["results"]) <= 2 and g["ranking"] == "lexical" for g in groups)
    assert groups[1]["results"][0]["name"].endswith("calendar_create_event")


def test_known_fields_rank_up_the_tool_that_takes_them(tmp_path: Path) -> None:
    plain = search(tmp_path, {"queries": [{"use_case": "weather forecast"}], "providers": ["kit"]})
    names = [r["name"] for r in plain["groups"][0]["results"]]
    assert names[0] == "kit__weather_forecast_by_city"  # same words: the catalogue order decides
    known = search(
        tmp_path,
        {
            "queries": [{"use_case": "weather forecast", "known_fields": "lat:48.85, lon:2.35"}],
            "providers": ["kit"],
        },
    )
    assert known["groups"][0]["results"][0]["name"] == "kit__weather_forecast_by_coordinates"


def test_providers_and_tags_narrow_the_results(tmp_path: Path) -> None:
    out = search(
        tmp_path, {"query": "weather forecast email event", "providers": ["other"], "tags": ["Mail"]}
    )
    assert [r["name"] for r in out["results"]] == ["other__mail_send_mail"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({}, "/query"),
        ({"query": "x", "queries": [{"use_case": "y"}]}, "/query"),
        ({"queries": [{"use_case": "y", "known_fields": "no colon here"}]}, "/queries/0/known_fields"),
    ],
)
def test_bad_arguments_are_refused_naming_the_field(tmp_path: Path, args: dict[str, Any], field: str) -> None:
    with pytest.raises(ArgumentsInvalid) as info:
        search(tmp_path, args)
    assert info.value.field == field


def test_more_than_five_use_cases_are_refused_by_the_schema(tmp_path: Path) -> None:
    with pytest.raises(ArgumentsInvalid) as info:
        search(tmp_path, {"queries": [{"use_case": str(i)} for i in range(6)]})
    assert info.value.field == "/queries"


def test_known_fields_parse_keys_and_ignore_empty_items() -> None:
    assert parse_known_fields("City: Paris, date:2026-12-01,,", "f") == ["city", "date"]


def test_a_well_known_toolkit_that_is_not_installed_is_suggested_with_its_install_command(
    tmp_path: Path,
) -> None:
    query = "take a screenshot of a web page in a headless browser"
    out = search(tmp_path, {"query": query}, can_install=True)
    suggestion = out["suggestions"][0]
    assert suggestion["toolkit"] == "puppeteer" and suggestion["kind"] == "mcp"
    assert suggestion["install"]["command"].startswith("toolspoke import mcp --slug puppeteer -- npx")
    # Suggestions sit beside the callable results, never among them.
    assert all(not r["name"].startswith("puppeteer") for r in out["results"])


def test_suggestions_go_only_to_callers_who_may_install(tmp_path: Path) -> None:
    out = search(tmp_path, {"query": "take a screenshot of a web page in a headless browser"})
    assert "suggestions" not in out


def test_an_installed_toolkit_is_not_suggested_and_a_good_installed_match_suppresses_suggestions(
    tmp_path: Path,
) -> None:
    query = "take a screenshot of a web page in a headless browser"
    out = search(tmp_path, {"query": query}, can_install=True, slug="puppeteer")
    assert all(s["toolkit"] != "puppeteer" for s in out.get("suggestions", []))
    grouped = search(
        tmp_path,
        {"queries": [{"use_case": "post a message to a slack channel"}, {"use_case": "weather forecast"}]},
        can_install=True,
    )
    slack, weather = grouped["groups"]
    assert slack["suggestions"][0]["toolkit"] == "slack"
    assert slack["suggestions"][0]["install"]["admin_api"]["path"] == "/api/v1/toolkits/openapi"
    assert "suggestions" not in weather


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"query": "A" * (MAX_QUERY_CHARS + 1)}, "/query"),
        ({"queries": [{"use_case": "ok"}, {"use_case": "x" * (MAX_QUERY_CHARS + 1)}]}, "/queries/1/use_case"),
        (
            {"queries": [{"use_case": "ok", "known_fields": "a:" * MAX_QUERY_CHARS}]},
            "/queries/0/known_fields",
        ),
    ],
)
def test_query_text_over_the_limit_is_refused_stating_it(
    tmp_path: Path, args: dict[str, Any], field: str
) -> None:
    # A protocol error (-32602) in every era, naming the field and the limit, before any pass
    # over the text (a 30 KB run of capitals took 97 s in the identifier splitter).
    with pytest.raises(InvalidParams) as info:
        search(tmp_path, args)
    exc = info.value
    assert not isinstance(exc, ArgumentsInvalid)
    assert (exc.rpc_code, exc.field, exc.data["limit"]) == (-32602, field, MAX_QUERY_CHARS)
    assert f"the limit is {MAX_QUERY_CHARS} characters" in exc.public_message


def test_a_query_at_the_limit_is_served(tmp_path: Path) -> None:
    out = search(tmp_path, {"query": ("send an email " * 200)[:MAX_QUERY_CHARS]})
    assert out["results"][0]["name"].endswith("send_mail")
