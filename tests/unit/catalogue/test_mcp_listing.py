"""An MCP server's tools/list becomes tools with names, kinds and schemas the gateway can use."""

from __future__ import annotations

import pytest

from appliance.catalogue.mcp_listing import convert_tools_list, kind_from_annotations
from appliance.errors import ImportFailed


@pytest.mark.parametrize(
    ("annotations", "kind"),
    [
        ({"readOnlyHint": True}, "read"),
        ({"readOnlyHint": True, "destructiveHint": True}, "read"),
        ({"readOnlyHint": False, "destructiveHint": False}, "write"),
        ({"destructiveHint": False}, "write"),
        ({"destructiveHint": True}, "destructive"),
        ({}, "destructive"),
        (None, "destructive"),
        ({"readOnlyHint": "yes"}, "destructive"),
    ],
)
def test_kinds_follow_the_specification_defaults(annotations: object, kind: str) -> None:
    assert kind_from_annotations(annotations) == kind


def test_tools_become_slug_prefixed_names_and_keep_the_upstream_name_for_the_call() -> None:
    draft = convert_tools_list(
        [
            {
                "name": "read_item",
                "description": "Read",
                "inputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": True},
            },
            {"name": "get-sum", "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}}}},
        ],
        "up",
    )
    assert [t.name for t in draft.tools] == ["up__read_item", "up__get-sum"]
    assert [t.binding for t in draft.tools] == [{"upstream_name": "read_item"}, {"upstream_name": "get-sum"}]
    assert [t.kind for t in draft.tools] == ["read", "destructive"]
    assert draft.source_kind == "mcp"


def test_names_that_clash_after_sanitising_stay_unique_and_deterministic() -> None:
    tools = [
        {"name": "a.b", "inputSchema": {"type": "object"}},
        {"name": "a b", "inputSchema": {"type": "object"}},
    ]
    first = [t.name for t in convert_tools_list(tools, "s").tools]
    second = [t.name for t in convert_tools_list(list(reversed(tools)), "s").tools]
    assert len(set(first)) == 2
    assert sorted(first) == sorted(second)


def test_malformed_entries_are_skipped_with_a_reason_and_broken_schemas_made_permissive() -> None:
    draft = convert_tools_list(
        [
            {"description": "no name"},
            "junk",
            {"name": "x", "inputSchema": {"type": "object", "required": "a"}},
            {"name": "x"},
        ],
        "s",
    )
    assert [t.name for t in draft.tools] == ["s__x"]
    assert draft.tools[0].input_schema == {"type": "object"}
    assert [s.reason for s in draft.skipped] == ["no 'name'", "no 'name'", "listed twice; the first is kept"]


def test_a_result_without_a_tools_array_is_refused() -> None:
    with pytest.raises(ImportFailed) as err:
        convert_tools_list("nope", "s")  # type: ignore[arg-type]
    assert err.value.field == "tools"
