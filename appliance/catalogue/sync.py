"""Re-sync planning (pure): a toolkit's stored tools + a fresh listing → what to change.

The rule the plan enforces: **a tool cannot change behind an approval.** An approval covers
one definition, identified by its fingerprint (a stable hash of what an agent and the
upstream act on: description, input schema, annotations). So:

- a tool new upstream is inserted ``pending``;
- a tool gone upstream is ``disabled``, never deleted (its name, kind override and history
  survive a flapping server);
- a tool whose fingerprint changed goes back to ``pending`` with the new definition stored;
- a ``disabled`` tool that reappears goes to ``pending`` even when unchanged: we do not know
  what it did while it was away, and re-approving is cheap while a silent return is not;
- an unchanged tool keeps its state (``active`` stays active, ``pending`` stays pending).

Tools are matched by their upstream name, the identity the upstream itself uses; a matched
tool keeps its stored gateway name so that agents' references stay valid.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson

from appliance.catalogue.naming import sanitise_action, short_hash, tool_name
from appliance.errors import ImportFailed
from appliance.models import Kind, ToolDraft

ToolState = Literal["active", "pending", "disabled"]
STATES: tuple[ToolState, ...] = ("active", "pending", "disabled")
Action = Literal["insert", "update", "disable", "keep"]
Why = Literal["new", "changed", "removed", "returned", "unchanged"]
_FINGERPRINT_VERSION = "v1"


def fingerprint_of(description: str, input_schema: Any, annotations: Any) -> str:
    """A stable hash of what an approval covers; key order and whitespace do not matter."""
    doc = {
        "description": description or "",
        "input_schema": input_schema or {},
        "annotations": annotations or {},
    }
    canonical = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return f"{_FINGERPRINT_VERSION}:{hashlib.sha256(canonical).hexdigest()[:32]}"


def fingerprint(tool: ToolDraft) -> str:
    return fingerprint_of(tool.description, tool.input_schema, tool.annotations)


@dataclass(frozen=True)
class StoredTool:
    """One tool as the catalogue holds it (every state), enough to plan a re-sync."""

    id: int
    name: str
    upstream_name: str
    state: ToolState
    fingerprint: str  # '' for tools stored before fingerprints existed
    kind: Kind
    kind_override: Kind | None
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, Any] = field(default_factory=dict)
    screening: list[dict[str, str]] | None = None  # None: stored before screening existed
    previous: dict[str, Any] | None = None  # the definition a pending change replaced

    @property
    def current_fingerprint(self) -> str:
        # Tools imported before fingerprints were stored are hashed from their stored
        # definition, so the first re-sync after an upgrade compares real definitions
        # instead of trusting (or distrusting) everything.
        return self.fingerprint or fingerprint_of(self.description, self.input_schema, self.annotations)


@dataclass(frozen=True)
class Step:
    """One change: ``draft`` is set for insert and update (the definition to store)."""

    action: Action
    why: Why
    name: str
    state: ToolState
    tool_id: int | None = None
    draft: ToolDraft | None = None
    fingerprint: str = ""
    screening: list[dict[str, str]] | None = None  # the draft's findings (None: not screened)

    @property
    def flagged(self) -> bool:
        return bool(self.screening) and self.state == "pending"


@dataclass
class SyncPlan:
    steps: list[Step] = field(default_factory=list)

    def _names(self, why: Why) -> list[str]:
        return sorted(s.name for s in self.steps if s.why == why)

    @property
    def added(self) -> list[str]:
        return self._names("new")

    @property
    def changed(self) -> list[str]:
        return self._names("changed")

    @property
    def removed(self) -> list[str]:
        return self._names("removed")

    @property
    def returned(self) -> list[str]:
        return self._names("returned")

    @property
    def unchanged(self) -> list[str]:
        return self._names("unchanged")

    @property
    def leaving_index(self) -> list[int]:
        """Ids of stored tools that may be indexed now and must not be after the plan.

        Unindexing an id that is not in the index is a no-op, so pending and disabled tools
        being updated are included without a check.
        """
        return [s.tool_id for s in self.steps if s.tool_id is not None and s.action in ("update", "disable")]

    @property
    def flagged(self) -> list[dict[str, Any]]:
        """The tools this plan holds pending for what the screening found, with the reasons."""
        return [
            {"name": s.name, "screening": s.screening}
            for s in sorted(self.steps, key=lambda s: s.name)
            if s.flagged and s.action != "keep"
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "added": self.added,
            "changed": self.changed,
            "removed": self.removed,
            "returned": self.returned,
            "unchanged": len(self.unchanged),
        }


def _fresh_name(draft: ToolDraft, slug: str, taken: set[str]) -> str:
    """The draft's name unless a stored tool (of another upstream name) holds it already.

    A disabled tool keeps its name, so a new upstream tool whose name sanitises to the same
    text gets a suffix hashed from its upstream name (as ``naming.assign_names`` does).
    """
    if draft.name not in taken:
        return draft.name
    base = sanitise_action(draft.upstream_name)
    for length in (6, 10, 16, 40):
        candidate = tool_name(slug, f"{base}_{short_hash(draft.upstream_name, length)}")
        if candidate not in taken:
            return candidate
    raise ImportFailed(f"cannot give upstream tool {draft.upstream_name!r} a unique name", field="name")


def plan_sync(stored: list[StoredTool], fresh: list[ToolDraft], slug: str) -> SyncPlan:
    """What a re-sync changes; deterministic (sorted by upstream name)."""
    by_upstream = {t.upstream_name: t for t in stored}
    fresh_by_upstream = {d.upstream_name: d for d in fresh}
    taken = {t.name for t in stored}
    plan = SyncPlan()
    for upstream in sorted(fresh_by_upstream):
        draft = fresh_by_upstream[upstream]
        print_ = fingerprint(draft)
        old = by_upstream.get(upstream)
        if old is None:
            name = _fresh_name(draft, slug, taken)
            taken.add(name)
            plan.steps.append(Step("insert", "new", name, "pending", None, draft, print_))
        elif old.state == "disabled":
            plan.steps.append(Step("update", "returned", old.name, "pending", old.id, draft, print_))
        elif old.current_fingerprint != print_:
            plan.steps.append(Step("update", "changed", old.name, "pending", old.id, draft, print_))
        else:
            plan.steps.append(Step("keep", "unchanged", old.name, old.state, old.id, None, print_))
    for upstream in sorted(by_upstream):
        old = by_upstream[upstream]
        if upstream not in fresh_by_upstream and old.state != "disabled":
            plan.steps.append(Step("disable", "removed", old.name, "disabled", old.id))
    return plan


def plan_replace(
    stored: list[StoredTool], fresh: list[ToolDraft], slug: str, *, new_state: ToolState, approvals: bool
) -> SyncPlan:
    """A re-import (``--replace``) over an existing toolkit: a re-sync that rewrites definitions.

    Tools are matched by upstream name exactly as ``plan_sync`` does, so a matched tool keeps
    its id, name and kind override (and with them grants, allow-lists and vectors). Every
    matched tool is rewritten from the fresh import (an OpenAPI binding or title may change
    without touching the fingerprint). States:

    - unchanged: keeps its state (an approval stands);
    - changed or returned, ``approvals`` (MCP, as a re-sync): ``pending``;
    - changed, otherwise (OpenAPI, catalogue: the operator's re-import is the review):
      keeps its state; returned: ``new_state``;
    - new: ``new_state`` (the import's: ``active``, or ``pending`` with approve-new);
    - gone: ``disabled``.
    """
    plan = plan_sync(stored, fresh, slug)
    old = {t.id: t for t in stored}
    drafts = {d.upstream_name: d for d in fresh}
    steps: list[Step] = []
    for step in plan.steps:
        if step.action == "insert":
            steps.append(replace(step, state=new_state))
        elif step.action in ("update", "keep") and step.tool_id is not None:
            before = old[step.tool_id]
            state: ToolState = before.state
            if step.why != "unchanged":
                state = "pending" if approvals else (new_state if step.why == "returned" else before.state)
            draft = drafts[before.upstream_name]
            steps.append(replace(step, action="update", state=state, draft=draft))
        else:
            steps.append(step)
    return SyncPlan(steps)


def screen_plan(
    plan: SyncPlan,
    stored: list[StoredTool],
    fresh: list[ToolDraft],
    findings: Mapping[str, list[dict[str, str]]] | None,
) -> SyncPlan:
    """Hold the tools whose fresh definition the screening flagged (``findings`` by upstream
    name; None: screening is off, nothing is held and nothing recorded).

    A new or changed tool with findings is stored ``pending`` whatever the plan said. An
    unchanged tool keeps its state, because its approval covered this very definition, unless
    it was stored before screening existed: then it is screened now like a new one.
    """
    if findings is None:
        return plan
    old = {t.id: t for t in stored}
    drafts = {d.upstream_name: d for d in fresh}
    steps: list[Step] = []
    for step in plan.steps:
        if step.draft is not None:
            rows = list(findings.get(step.draft.upstream_name, []))
            state: ToolState = "pending" if rows and step.state != "disabled" else step.state
            steps.append(replace(step, state=state, screening=rows))
        elif step.action == "keep" and step.tool_id is not None:
            before = old[step.tool_id]
            rows = list(findings.get(before.upstream_name, []))
            if before.screening is None and rows and before.state == "active":
                draft = drafts[before.upstream_name]
                steps.append(replace(step, action="update", state="pending", draft=draft, screening=rows))
            else:
                steps.append(replace(step, screening=rows if before.screening is None else None))
        else:
            steps.append(step)
    return SyncPlan(steps)
