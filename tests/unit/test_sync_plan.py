"""Re-sync planning (pure): new → pending, gone → disabled, changed → pending, unchanged kept."""

from __future__ import annotations

from typing import Any

from appliance.catalogue.mcp_listing import convert_tools_list
from appliance.catalogue.sync import (
    StoredTool,
    ToolState,
    fingerprint,
    fingerprint_of,
    plan_replace,
    plan_sync,
)
from appliance.models import ToolDraft

SLUG = "kit"


def listed(*tools: dict[str, Any]) -> list[ToolDraft]:
    return convert_tools_list(list(tools), SLUG).tools


def tool(name: str, description: str = "does things", **extra: Any) -> dict[str, Any]:
    schema = extra.pop("inputSchema", {"type": "object", "properties": {"x": {"type": "string"}}})
    return {"name": name, "description": description, "inputSchema": schema, **extra}


def stored_from(
    drafts: list[ToolDraft], state: ToolState = "active", *, with_prints: bool = True
) -> list[StoredTool]:
    return [
        StoredTool(
            id=i + 1,
            name=d.name,
            upstream_name=d.upstream_name,
            state=state,
            fingerprint=fingerprint(d) if with_prints else "",
            kind=d.kind,
            kind_override=None,
            description=d.description,
            input_schema=d.input_schema,
            annotations=d.annotations,
        )
        for i, d in enumerate(drafts)
    ]


def test_an_unchanged_listing_changes_nothing_and_keeps_every_state() -> None:
    drafts = listed(tool("a"), tool("b"))
    stored = [
        *stored_from(drafts[:1], "active"),
        StoredTool(2, drafts[1].name, "b", "pending", fingerprint(drafts[1]), drafts[1].kind, None),
    ]
    plan = plan_sync(stored, listed(tool("a"), tool("b")), SLUG)
    assert [s.action for s in plan.steps] == ["keep", "keep"]
    assert [s.state for s in plan.steps] == ["active", "pending"]
    assert plan.leaving_index == []
    assert plan.as_dict() == {"added": [], "changed": [], "removed": [], "returned": [], "unchanged": 2}


def test_a_new_upstream_tool_is_inserted_pending_with_its_fingerprint() -> None:
    stored = stored_from(listed(tool("a")))
    fresh = listed(tool("a"), tool("b"))
    plan = plan_sync(stored, fresh, SLUG)
    inserted = [s for s in plan.steps if s.action == "insert"]
    assert len(inserted) == 1
    assert inserted[0].name == "kit__b" and inserted[0].state == "pending"
    assert inserted[0].fingerprint == fingerprint(fresh[1])
    assert plan.added == ["kit__b"]


def test_a_tool_gone_upstream_is_disabled_not_deleted_and_leaves_the_index() -> None:
    stored = stored_from(listed(tool("a"), tool("b")))
    plan = plan_sync(stored, listed(tool("a")), SLUG)
    disabled = [s for s in plan.steps if s.action == "disable"]
    assert [(s.name, s.state, s.tool_id) for s in disabled] == [("kit__b", "disabled", 2)]
    assert plan.removed == ["kit__b"]
    assert plan.leaving_index == [2]


def test_an_already_disabled_tool_still_absent_is_left_alone() -> None:
    stored = stored_from(listed(tool("b")), "disabled")
    plan = plan_sync(stored, [], SLUG)
    assert plan.steps == []


def test_a_changed_description_schema_or_annotation_sends_an_approved_tool_back_to_pending() -> None:
    base = listed(tool("a"))
    variants = [
        tool("a", description="now deletes things"),
        tool("a", inputSchema={"type": "object", "properties": {"x": {"type": "integer"}}}),
        tool("a", annotations={"readOnlyHint": True}),
    ]
    for variant in variants:
        plan = plan_sync(stored_from(base), listed(variant), SLUG)
        (step,) = plan.steps
        assert (step.action, step.why, step.state) == ("update", "changed", "pending")
        assert step.draft is not None and step.fingerprint == fingerprint(step.draft)
        assert plan.leaving_index == [1]


def test_a_pending_tool_that_changes_again_stays_pending_with_the_newest_definition() -> None:
    plan = plan_sync(stored_from(listed(tool("a")), "pending"), listed(tool("a", "v2")), SLUG)
    (step,) = plan.steps
    assert step.state == "pending" and step.draft is not None and step.draft.description == "v2"


def test_a_disabled_tool_that_returns_unchanged_comes_back_pending() -> None:
    plan = plan_sync(stored_from(listed(tool("a")), "disabled"), listed(tool("a")), SLUG)
    (step,) = plan.steps
    assert (step.action, step.why, step.state) == ("update", "returned", "pending")
    assert plan.returned == ["kit__a"]


def test_the_fingerprint_ignores_key_order_and_the_title() -> None:
    one = fingerprint_of("d", {"type": "object", "properties": {"a": {}, "b": {}}}, {"x": 1, "y": 2})
    two = fingerprint_of("d", {"properties": {"b": {}, "a": {}}, "type": "object"}, {"y": 2, "x": 1})
    assert one == two
    (a,) = listed(tool("a", title="One"))
    (b,) = listed(tool("a", title="Two"))
    assert fingerprint(a) == fingerprint(b)


def test_tools_stored_before_fingerprints_are_compared_by_their_stored_definition() -> None:
    stored = stored_from(listed(tool("a"), tool("b")), with_prints=False)
    plan = plan_sync(stored, listed(tool("a"), tool("b", "changed")), SLUG)
    assert [(s.name, s.action) for s in plan.steps] == [("kit__a", "keep"), ("kit__b", "update")]


def test_a_matched_tool_keeps_its_stored_name_and_a_new_one_never_takes_a_held_name() -> None:
    # "a b" was stored as kit__a_b; now "a_b" appears too and would sanitise to the same name.
    (old,) = listed(tool("a b"))
    assert old.name == "kit__a_b"
    stored = stored_from([old], "disabled")
    fresh = listed(tool("a_b"))
    plan = plan_sync(stored, fresh, SLUG)
    inserted = next(s for s in plan.steps if s.action == "insert")
    assert inserted.name != "kit__a_b" and inserted.name.startswith("kit__a_b_")
    assert len({s.name for s in plan.steps}) == len(plan.steps)


def test_the_plan_is_deterministic_whatever_the_listing_order() -> None:
    stored = stored_from(listed(tool("a"), tool("c")))
    one = plan_sync(stored, listed(tool("b"), tool("a"), tool("d")), SLUG)
    two = plan_sync(list(reversed(stored)), listed(tool("d"), tool("a"), tool("b")), SLUG)
    assert one.steps == two.steps
    assert one.as_dict() == {
        "added": ["kit__b", "kit__d"],
        "changed": [],
        "removed": ["kit__c"],
        "returned": [],
        "unchanged": 1,
    }


def _replace_world() -> tuple[list[StoredTool], list[ToolDraft]]:
    """Stored: a active, b active, c pending, d disabled. Fresh: a same, b changed, d back, e new."""
    old = listed(tool("a"), tool("b"), tool("c"), tool("d"))
    stored = [
        *stored_from(old[:2], "active"),
        *[StoredTool(3, old[2].name, "c", "pending", fingerprint(old[2]), old[2].kind, None)],
        *[StoredTool(4, old[3].name, "d", "disabled", fingerprint(old[3]), old[3].kind, "write")],
    ]
    fresh = listed(tool("a"), tool("b", "does other things"), tool("d"), tool("e"))
    return stored, fresh


def test_an_mcp_replace_is_a_resync_that_rewrites_every_matched_tool_keeping_its_id() -> None:
    stored, fresh = _replace_world()
    plan = plan_replace(stored, fresh, SLUG, new_state="active", approvals=True)
    by_name = {s.name.split("__")[1]: s for s in plan.steps}
    assert {n: (s.action, s.why, s.state, s.tool_id) for n, s in by_name.items()} == {
        "a": ("update", "unchanged", "active", 1),
        "b": ("update", "changed", "pending", 2),
        "c": ("disable", "removed", "disabled", 3),
        "d": ("update", "returned", "pending", 4),
        "e": ("insert", "new", "active", None),
    }
    assert all(s.draft is not None for s in plan.steps if s.action != "disable")
    assert sorted(plan.leaving_index) == [1, 2, 3, 4]


def test_an_openapi_replace_keeps_states_of_changed_tools_and_gives_returning_ones_the_import_s() -> None:
    stored, fresh = _replace_world()
    plan = plan_replace(stored, fresh, SLUG, new_state="pending", approvals=False)
    states = {s.name.split("__")[1]: s.state for s in plan.steps}
    assert states == {"a": "active", "b": "active", "c": "disabled", "d": "pending", "e": "pending"}
