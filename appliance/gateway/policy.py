"""The call policy in the gateway: the pipeline's policy stage, and the scope of what could run.

The rules are ``access/policy.py``'s (the read-only guard; allow and deny per toolkit, per
kind and per tool). Here they are applied twice, from the same ``Rules``:

- ``check``, the pipeline stage after resolve (``gateway/pipeline.py``): a tool the caller
  may see but may not run is refused before validation and reservation, so nothing is
  charged and nothing is sent, and the refusal is the attempt's one audit row; a tool under
  an ``approve`` rule is let through with the rule (``Need``) for the approval stage
  (``gateway/approvals.py``), which runs once the arguments are validated;
- ``runnable_in``, the caller's access scope narrowed to what ``check`` would let through,
  for search, list and describe: what they show is exactly what could run.

The rules are read once per cache generation (the loop's memo here, the reader's memo in
``runnable_in``): an allowed call costs a dict lookup and a few comparisons, no database hop.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.access import dataflow, policy, visibility
from appliance.db import SyncReader
from appliance.errors import CallRefused
from appliance.gateway.attempt import Attempt
from appliance.gateway.runtime import Runtime
from appliance.models import Principal, Scope, Tool

_KEY = ("call_policy",)
_NARROW = ("user", "owner", "admin")  # who may approve, from the most people to the fewest


@dataclass(frozen=True, slots=True)
class Need:
    """The call may run once a person approves it: the rule's level, who may approve, and the
    policy version the approval will bind to."""

    rule: str
    approver: str
    version: int
    why: str = ""  # the data-flow guard's reason, when it asked (``rule`` "dataflow")


def read_only(rt: Runtime, principal: Principal) -> bool:
    """The guard applies: the appliance, the key or its agent is read-only."""
    return rt.settings.read_only or principal.read_only


async def rules(rt: Runtime) -> policy.Rules:
    """Every toolkit's rules, remembered until the database changes."""
    found: policy.Rules | None = rt.db.memo().get(_KEY)  # the common case: no hop
    if found is None:
        found = await rt.db.remembered(_KEY, policy.rules_in)
    return found


async def check(rt: Runtime, principal: Principal, tool: Tool, attempt: Attempt | None = None) -> Need | None:
    """Stage: refuse a tool the policy does not let this caller run (``CallRefused``); None:
    it runs; a ``Need``: it runs once approved (the approval stage decides). With the
    ``attempt``, the tool's data-flow labels are noted on it for the marks after dispatch."""
    current = await rules(rt)
    why = policy.refusal(current, tool.toolkit_id, tool.name, tool.kind, read_only=read_only(rt, principal))
    need = None
    if why is not None:
        if why[0] != "approval_required":
            raise refusal(rt, tool, why, current.version)
        level = why[1]
        need = Need(level, current.approver(tool.toolkit_id, tool.name, tool.kind, level), current.version)
    if current.labels:  # the data-flow guard: no label anywhere costs this one test
        labels = current.labels_of(tool.toolkit_id, tool.name)
        if labels:
            if attempt is not None:
                attempt.labels = labels
            if "outward" in labels:
                return guarded(rt, principal, tool, current, need, attempt)
    return need


def guard_of(rt: Runtime, current: policy.Rules, toolkit_id: int) -> dataflow.Guard:
    """The guard's setting for this toolkit's outward tools: its own, else the appliance's."""
    found = current.guards.get(toolkit_id)
    if found is None:
        found = dataflow.Guard(int(rt.settings.dataflow_window_s), rt.settings.dataflow_action)
    return found


def guarded(
    rt: Runtime,
    principal: Principal,
    tool: Tool,
    current: policy.Rules,
    need: Need | None,
    attempt: Attempt | None,
) -> Need | None:
    """An outward tool: held when this caller's recent calls combined private data and
    untrusted content within the window (refused, or a ``Need`` carrying the guard's reason)."""
    guard = guard_of(rt, current, tool.toolkit_id)
    flow = rt.taints.flow(principal, guard)
    if flow is None:
        return need
    now = rt.taints.now()
    text = flow.text(tool.name, now)
    if attempt is not None:
        attempt.detail = text
    if guard.action == "deny":
        raise CallRefused(
            f"{tool.name} is refused by the {text}. Nothing was run.",
            reason="dataflow_denied",
            data={
                "kind": tool.kind,
                "rule": "dataflow",
                "policy_version": current.version,
                "dataflow": flow.data(now),
            },
        )
    # one approval covers both an ``approve`` rule and the guard: the guard's reason is shown,
    # and the narrower of the two approvers decides
    approver = guard.approver if need is None else max(guard.approver, need.approver, key=_NARROW.index)
    return Need("dataflow", approver, current.version, text)


def refusal(rt: Runtime, tool: Tool, why: tuple[str, str], version: int) -> CallRefused:
    reason, rule = why
    data = {"kind": tool.kind, "rule": rule, "policy_version": version}
    if reason == "read_only":
        who = "the appliance is" if rt.settings.read_only else "this key (or its agent) is"
        return CallRefused(
            f"{tool.name} is a {tool.kind} tool and {who} read-only: only read tools run; nothing was run",
            reason=reason,
            data=data,
        )
    return CallRefused(
        f"{tool.name} is denied by its toolkit's call policy (the {rule} rule); nothing was run",
        reason=reason,
        data=data,
    )


def runnable_in(r: SyncReader, rt: Runtime, principal: Principal) -> Scope:
    """The caller's access scope, narrowed to the tools ``check`` would let run (one hop:
    a function over the reader, both parts from its memo)."""
    scope = visibility.scope_in(r, principal)
    current = policy.rules_in(r)
    guarded = read_only(rt, principal)
    if not guarded and not current.denied:
        return scope
    return Scope(
        scope.toolkits,
        scope.restricted,
        kinds=policy.READ_KINDS if guarded else None,
        denied=current.denied,
    )
