"""What changed in a tool held pending (pure): unified diffs of its description and schema.

The owner approves a definition, so a changed one is shown against the one it replaced: the
description line by line, the input schema and annotations as canonical JSON (sorted keys,
two-space indent) so that key order and spacing never show as changes. Upstream text is
hostile: invisible characters are shown as ``<U+200B>`` (the reviewer must see them, and a
terminal must not act on them), and the work is bounded: common leading and trailing lines
are set aside in one pass, and a middle longer than ``DIFF_LINES`` on either side is
summarised instead of diffed (difflib's matching is quadratic in the worst case).
"""

from __future__ import annotations

import difflib
from typing import Any

import orjson

from appliance.catalogue.screening import reveal

DIFF_LINES = 400
CONTEXT = 3


def canonical(value: Any) -> str:
    """A JSON value as the diff compares it: sorted keys, two-space indent."""
    return orjson.dumps(
        value, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
    ).decode()


def _lines(text: str) -> list[str]:
    return reveal(text).split("\n") if text else []


def unified(before: str, after: str, *, label: str) -> str:
    """A unified diff of two texts ('' when equal), bounded in work and size."""
    if before == after:
        return ""
    a, b = _lines(before), _lines(after)
    head = 0
    while head < len(a) and head < len(b) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < len(a) - head and tail < len(b) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    lead = max(0, head - CONTEXT)
    a_mid, b_mid = a[lead : len(a) - max(0, tail - CONTEXT)], b[lead : len(b) - max(0, tail - CONTEXT)]
    if len(a_mid) > DIFF_LINES + 2 * CONTEXT or len(b_mid) > DIFF_LINES + 2 * CONTEXT:
        return (
            f"--- {label} (before)\n+++ {label} (pending)\n"
            f"@@ lines {head + 1}-{len(a) - tail} replaced by {head + 1}-{len(b) - tail}:"
            f" too long to diff ({len(a) - head - tail} and {len(b) - head - tail} lines) @@"
        )
    diff = difflib.unified_diff(
        a_mid, b_mid, f"{label} (before)", f"{label} (pending)", lineterm="", n=CONTEXT
    )
    out = []
    for line in diff:
        if line.startswith("@@"):
            line = _shift(line, lead)
        out.append(line)
    return "\n".join(out)


def _shift(hunk: str, by: int) -> str:
    # "@@ -3,4 +3,5 @@": the hunk's line numbers in the whole text, not the diffed middle.
    parts = hunk.split(" ")
    for i in (1, 2):
        start, comma, count = parts[i][1:].partition(",")
        parts[i] = f"{parts[i][0]}{int(start) + by}{comma}{count}"
    return " ".join(parts)


def changes(
    previous: dict[str, Any] | None, description: str, input_schema: Any, annotations: Any
) -> dict[str, str] | None:
    """The diffs of a pending tool against what it replaced; None when nothing was replaced."""
    if not isinstance(previous, dict):
        return None
    return {
        "description": unified(
            str(previous.get("description") or ""), description or "", label="description"
        ),
        "input_schema": unified(
            canonical(previous.get("input_schema") or {}), canonical(input_schema or {}), label="input_schema"
        ),
        "annotations": unified(
            canonical(previous.get("annotations") or {}), canonical(annotations or {}), label="annotations"
        ),
    }
