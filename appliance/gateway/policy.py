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

from appliance.access import policy, visibility
from appliance.db import SyncReader
from appliance.errors import CallRefused
from appliance.gateway.runtime import Runtime
from appliance.models import Principal, Scope, Tool

_KEY = ("call_policy",)


@dataclass(frozen=True, slots=True)
class Need:
    """The call may run once a person approves it: the rule's level, who may approve, and the
    policy version the approval will bind to."""

    rule: str
    approver: str
    version: int


def read_only(rt: Runtime, principal: Principal) -> bool:
    """The guard applies: the appliance, the key or its agent is read-only."""
    return rt.settings.read_only or principal.read_only


async def rules(rt: Runtime) -> policy.Rules:
    """Every toolkit's rules, remembered until the database changes."""
    found: policy.Rules | None = rt.db.memo().get(_KEY)  # the common case: no hop
    if found is None:
        found = await rt.db.remembered(_KEY, policy.rules_in)
    return found


async def check(rt: Runtime, principal: Principal, tool: Tool) -> Need | None:
    """Stage: refuse a tool the policy does not let this caller run (``CallRefused``); None:
    it runs; a ``Need``: it runs once approved (the approval stage decides)."""
    current = await rules(rt)
    why = policy.refusal(current, tool.toolkit_id, tool.name, tool.kind, read_only=read_only(rt, principal))
    if why is None:
        return None
    if why[0] == "approval_required":
        level = why[1]
        return Need(level, current.approver(tool.toolkit_id, tool.name, tool.kind, level), current.version)
    raise refusal(rt, tool, why, current.version)


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
