"""The diffs a pending tool shows: what changed, in canonical form, bounded on hostile sizes."""

from __future__ import annotations

from typing import Any

from appliance.catalogue.changes import DIFF_LINES, canonical, changes, unified
from tests.unit.test_hostile_text import LINEAR_CEILING, RATIO, measure

BEFORE = {
    "description": "Echo text.",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
    "annotations": {"readOnlyHint": True},
}


def test_a_changed_description_and_schema_show_as_unified_diffs() -> None:
    schema = {"properties": {"text": {"type": "string"}, "loud": {"type": "boolean"}}, "type": "object"}
    diff = changes(BEFORE, "Echo text.\nNow loudly.", schema, {"readOnlyHint": True})
    assert diff is not None
    assert diff["description"].splitlines() == [
        "--- description (before)",
        "+++ description (pending)",
        "@@ -1 +1,2 @@",
        " Echo text.",
        "+Now loudly.",
    ]
    assert '+    "loud": {' in diff["input_schema"].splitlines()
    assert not any(
        line.startswith("-") and not line.startswith("---") for line in diff["input_schema"].splitlines()
    )
    assert diff["annotations"] == ""


def test_key_order_and_spacing_are_not_changes() -> None:
    reordered = {"properties": {"text": {"type": "string"}}, "type": "object"}
    assert changes(BEFORE, "Echo text.", reordered, {"readOnlyHint": True}) == {
        "description": "",
        "input_schema": "",
        "annotations": "",
    }
    assert canonical({"b": 1, "a": [1]}) == '{\n  "a": [\n    1\n  ],\n  "b": 1\n}'


def test_a_tool_with_nothing_before_it_has_no_changes() -> None:
    assert changes(None, "Echo.", {}, {}) is None


def test_invisible_characters_are_shown_in_the_diff() -> None:
    diff = unified("Echo.", "Echo.\u200b\x1b[2J", label="description")
    assert "+Echo.<U+200B><U+001B>[2J" in diff.splitlines()


def test_hunks_keep_their_line_numbers_in_the_whole_text() -> None:
    before = "\n".join(f"line {i}" for i in range(1, 101))
    diff = unified(before, before.replace("line 50", "line fifty"), label="description")
    assert "@@ -47,7 +47,7 @@" in diff.splitlines()
    assert "-line 50" in diff.splitlines() and "+line fifty" in diff.splitlines()


def test_a_change_too_long_to_diff_is_summarised() -> None:
    before = "\n".join(f"a{i}" for i in range(DIFF_LINES * 3))
    after = "\n".join(f"b{i}" for i in range(DIFF_LINES * 3))
    diff = unified("head\n" + before + "\ntail", "head\n" + after + "\ntail", label="input_schema")
    assert diff.splitlines()[-1] == (
        f"@@ lines 2-{DIFF_LINES * 3 + 1} replaced by 2-{DIFF_LINES * 3 + 1}: too long to diff"
        f" ({DIFF_LINES * 3} and {DIFF_LINES * 3} lines) @@"
    )


def test_diff_work_grows_linearly_with_hostile_sizes() -> None:
    def make(n: int) -> tuple[str, str]:
        lines = [f"x{i % 7}" for i in range(n)]
        return "\n".join(lines), "\n".join(reversed(lines))

    def diff(pair: Any) -> str:
        return unified(pair[0], pair[1], label="description")

    ratio, call = measure(diff, make, n=2_000)
    assert ratio < RATIO or call < LINEAR_CEILING
