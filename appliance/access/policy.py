"""Call policy (issue 20): what may run, beyond what may be seen. The one place its rules live.

- **Read-only guard**: a read-only caller runs read tools only. A caller is read-only when
  its key is, its agent is, or the whole appliance is (the ``read_only`` setting, which the
  gateway passes in: this room does not read settings). An agent's state never widens a key.
- **Rules per toolkit, per kind and per tool**: ``allow``, ``approve`` (a person's yes for
  each call, ``access/approvals.py``) or ``deny``, for a toolkit's every tool, for its tools
  of one kind, or for one tool (by full name, surviving a re-import). An ``approve`` rule
  says who may approve: the toolkit's ``owner`` (or an admin; the default), an ``admin``, or
  also the ``user`` the calling agent acts for.
  The most specific rule wins (tool over kind over toolkit); no rule at all is ``allow``.
  A rule binds every caller, the toolkit's owner and the operator included: it says what
  the appliance runs, not who may see.
- **Version**: every change to a rule or a read-only flag bumps one counter, which a later
  approval binds to, so that a change of policy voids what was approved under the old one.

The data-flow guard's labels and per-toolkit settings (``access/dataflow.py``) are read into
the same ``Rules`` and move the same version.

The pipeline asks ``refusal`` of each call (``gateway/policy.py``); search, list and describe
leave out the same tools through ``Rules.denied`` and the kinds a read-only caller may run,
so what they show is what could run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from appliance.access import dataflow
from appliance.db import ReadConn, SyncReader, WriteTx
from appliance.errors import Forbidden, InvalidParams
from appliance.models import Principal

ACTIONS = ("allow", "approve", "deny")
APPROVERS = ("owner", "admin", "user")
KINDS = ("read", "write", "destructive")
READ_KINDS = frozenset({"read"})
_MEMO = "call_policy"


@dataclass(frozen=True)
class Rules:
    """Every toolkit's rules, as read at one cache generation (small: rows per toolkit)."""

    version: int = 0
    toolkits: dict[int, str] = field(default_factory=dict)  # toolkit id → action
    kinds: dict[tuple[int, str], str] = field(default_factory=dict)  # (toolkit id, kind) → action
    tools: dict[tuple[int, str], str] = field(default_factory=dict)  # (toolkit id, name) → action
    denied: frozenset[int] = frozenset()  # ids of the tools these rules deny (for search)
    # who may approve, per ``approve`` rule: (toolkit id, tool name or "", kind or "") → approver
    approvers: dict[tuple[int, str, str], str] = field(default_factory=dict)
    # the data-flow guard (``access/dataflow.py``): (toolkit id, tool name or "") → labels,
    # and the guard's setting of the toolkits that have their own
    labels: dict[tuple[int, str], frozenset[str]] = field(default_factory=dict)
    guards: dict[int, dataflow.Guard] = field(default_factory=dict)

    def labels_of(self, toolkit_id: int, name: str) -> frozenset[str]:
        """A tool's labels: its own row's, else its toolkit's (callers test ``labels`` first)."""
        found = self.labels.get((toolkit_id, name))
        if found is None:
            found = self.labels.get((toolkit_id, ""), dataflow.NO_LABELS)
        return found

    def rule(self, toolkit_id: int, name: str, kind: str) -> tuple[str, str] | None:
        """The rule that decides this tool, most specific first: (level, action); None: no rule."""
        if not self.toolkits:  # no rule anywhere: the common case costs one test
            return None
        action = self.tools.get((toolkit_id, name))
        if action is not None:
            return "tool", action
        action = self.kinds.get((toolkit_id, kind))
        if action is not None:
            return "kind", action
        action = self.toolkits.get(toolkit_id)
        return None if action is None else ("toolkit", action)

    def approver(self, toolkit_id: int, name: str, kind: str, level: str) -> str:
        """Who may approve under the ``approve`` rule at ``level`` that decided this tool."""
        key = (toolkit_id, name, "") if level == "tool" else (toolkit_id, "", kind if level == "kind" else "")
        return self.approvers.get(key, "owner")


NO_RULES = Rules()


def refusal(
    rules: Rules, toolkit_id: int, name: str, kind: str, *, read_only: bool
) -> tuple[str, str] | None:
    """Why a call of this tool may not run as it is: (reason, the rule's level or "read_only");
    None: it may. ``approval_required``: it may run once a person approves it.

    The read-only guard comes first: it does not depend on the toolkit's rules, and neither an
    ``allow`` rule nor an approval lifts it."""
    if read_only and kind not in READ_KINDS:
        return "read_only", "read_only"
    found = rules.rule(toolkit_id, name, kind)
    if found is None or found[1] == "allow":
        return None
    return ("policy_denied" if found[1] == "deny" else "approval_required"), found[0]


def rules_in(r: SyncReader) -> Rules:
    """Every rule and the version, from the reader's memo when nothing changed since."""
    found: Rules | None = r.memo.get(_MEMO)
    if found is None:
        found = r.memo[_MEMO] = _load(r)
    return found


async def rules(conn: ReadConn) -> Rules:
    return await conn.batch(rules_in)


def _load(r: SyncReader) -> Rules:
    version = int(r.one("SELECT version FROM call_policy_version WHERE id = 1")[0])
    labels, guards = dataflow.labels_in(r)
    rows = r.all("SELECT toolkit_id, tool_name, kind, action, approver FROM call_policies")
    if not rows:
        return Rules(version=version, labels=labels, guards=guards)
    toolkits: dict[int, str] = {}
    kinds: dict[tuple[int, str], str] = {}
    tools: dict[tuple[int, str], str] = {}
    approvers: dict[tuple[int, str, str], str] = {}
    for kit, name, kind, action, approver in rows:
        if action == "approve":
            approvers[(int(kit), name, kind)] = approver
        if name:
            tools[(int(kit), name)] = action
        elif kind:
            kinds[(int(kit), kind)] = action
        else:
            toolkits[int(kit)] = action
    # ``rule`` asks ``toolkits`` first to skip toolkits without rules: every toolkit with a
    # rule has an entry there ("allow" when only its kinds or tools have rules).
    for kit, _ in (*kinds, *tools):
        toolkits.setdefault(kit, "allow")
    decided = Rules(version, toolkits, kinds, tools, approvers=approvers)
    denied = [
        int(tool_id)
        for tool_id, kit, name, kind in r.all(
            "SELECT id, toolkit_id, name, kind FROM tools WHERE toolkit_id IN (SELECT DISTINCT toolkit_id"
            " FROM call_policies)"
        )
        if (found := decided.rule(int(kit), name, kind)) is not None and found[1] == "deny"
    ]
    return Rules(version, toolkits, kinds, tools, frozenset(denied), approvers, labels, guards)


# -- changes -------------------------------------------------------------------------------


async def bump(tx: WriteTx) -> int:
    """A change of policy: the version moves (inside the change's own transaction)."""
    await tx.run("UPDATE call_policy_version SET version = version + 1 WHERE id = 1")
    return await version(tx)


async def version(conn: ReadConn) -> int:
    return int((await conn.one("SELECT version FROM call_policy_version WHERE id = 1"))[0])


async def toolkit_rules(conn: ReadConn, toolkit_id: int) -> dict[str, Any]:
    """A toolkit's rules as the admin faces show them, with the policy version."""
    rows = await conn.all(
        "SELECT tool_name, kind, action, approver FROM call_policies WHERE toolkit_id = ?"
        " ORDER BY kind, tool_name",
        (toolkit_id,),
    )
    out: dict[str, Any] = {"toolkit": None, "kinds": {}, "tools": {}}
    approvers: dict[str, Any] = {"toolkit": None, "kinds": {}, "tools": {}}
    for name, kind, action, approver in rows:
        who = approver if action == "approve" else None
        if name:
            out["tools"][name] = action
            if who:
                approvers["tools"][name] = who
        elif kind:
            out["kinds"][kind] = action
            if who:
                approvers["kinds"][kind] = who
        else:
            out["toolkit"] = action
            approvers["toolkit"] = who
    return {"rules": out, "approvers": approvers, "version": await version(conn)}


def check_action(value: Any) -> str | None:
    """``allow``, ``approve``, ``deny``, or None (no rule: the less specific one decides)."""
    if value is None or value in ACTIONS:
        return value
    raise InvalidParams(
        "'action' must be 'allow', 'approve', 'deny' or null (remove the rule)", field="action"
    )


def check_approver(value: Any, action: str | None) -> str:
    """Who may approve under an ``approve`` rule (default ``owner``: the owner or an admin)."""
    if value is None:
        return "owner"
    if action != "approve":
        raise InvalidParams("'approver' is set only with 'action': 'approve'", field="approver")
    if value not in APPROVERS:
        raise InvalidParams("'approver' must be 'owner', 'admin' or 'user'", field="approver")
    return str(value)


def check_kind(value: Any) -> str:
    if value not in KINDS:
        raise InvalidParams("'kind' must be 'read', 'write' or 'destructive'", field="kind")
    return str(value)


async def set_rule(
    tx: WriteTx,
    toolkit_id: int,
    *,
    tool_name: str = "",
    kind: str = "",
    action: str | None,
    approver: str = "owner",
) -> None:
    """Set (or, ``action`` None, remove) one rule; the version moves either way."""
    if action is None:
        await tx.run(
            "DELETE FROM call_policies WHERE toolkit_id = ? AND tool_name = ? AND kind = ?",
            (toolkit_id, tool_name, kind),
        )
    else:
        await tx.run(
            "INSERT INTO call_policies (toolkit_id, tool_name, kind, action, approver) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (toolkit_id, tool_name, kind) DO UPDATE SET action = excluded.action,"
            " approver = excluded.approver",
            (toolkit_id, tool_name, kind, action, approver),
        )
    await bump(tx)


async def tool_in_toolkit(conn: ReadConn, toolkit_id: int, name: str) -> bool:
    """Whether the toolkit has (or had: any state) a tool of this full name."""
    row = await conn.one("SELECT 1 FROM tools WHERE toolkit_id = ? AND name = ?", (toolkit_id, name))
    return row is not None


def require_unguarded(actor: Principal, what: str = "change call policy or read-only flags") -> None:
    """A read-only key changes no call policy and issues no key that is not read-only: else it
    could lift its own guard."""
    if actor.read_only:
        raise Forbidden(f"a read-only key cannot {what}")


def check_flag(value: Any, field_name: str = "read_only") -> bool:
    if not isinstance(value, bool):
        raise InvalidParams(f"'{field_name}' must be true or false", field=field_name)
    return value
