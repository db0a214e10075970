"""The data-flow guard's rules (issue 20, item 7): labels, the guard's setting, the decision.

- **Labels**, per toolkit and per tool (a tool's set replaces its toolkit's, an empty set
  included): ``private`` (the tool reads private data), ``untrusted`` (it brings in content
  from strangers: web pages, mail, issues), ``outward`` (it communicates outside).
- **The guard's setting**, per toolkit, for its outward tools: a ``window`` in seconds and an
  ``action``, ``approve`` (with who may approve, as an ``approve`` rule says it) or ``deny``;
  a toolkit without one takes the appliance-wide setting, which the gateway passes in (this
  room does not read settings).
- **The decision** (``tripped``): when one agent's recent calls, within the window, read
  private data and brought in untrusted content (in either order, or in one call of a tool
  labelled both), a call to an outward tool needs the guard's action. The marks themselves
  are the gateway's, in memory (``gateway/dataflow.py``); what they are checked against is
  here.

Labels and settings are part of the call policy: read with its ``Rules``
(``access/policy.py``), and every change moves the policy version, so an approval given
under the old labels is void.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.db import ReadConn, SyncReader, WriteTx
from appliance.errors import InvalidParams

LABELS = ("private", "untrusted", "outward")
GUARD_ACTIONS = ("approve", "deny")
MAX_WINDOW_S = 7 * 86400
NO_LABELS: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Guard:
    """The guard's setting for one toolkit's outward tools."""

    window_s: int
    action: str  # approve or deny
    approver: str = "owner"
    source: str = "appliance"  # where it was set: "toolkit" or "appliance"


@dataclass(frozen=True, slots=True)
class Mark:
    """One label's latest mark in an agent's recent calls: when (monotonic seconds) and by
    which tool."""

    at: float
    tool: str


@dataclass(frozen=True, slots=True)
class Flow:
    """Why the guard holds an outward call: the two earlier marks, within the window."""

    private: Mark
    untrusted: Mark
    window_s: int
    action: str

    def text(self, tool: str, now: float) -> str:
        """The reason as the audit, the refusal and the approval queue show it."""
        return (
            f"data-flow guard: {tool} is labelled outward, and within the last {self.window_s} s this "
            f"agent read private data ({self.private.tool}, {_ago(now - self.private.at)}) and untrusted "
            f"content ({self.untrusted.tool}, {_ago(now - self.untrusted.at)}); action {self.action}"
        )

    def data(self, now: float) -> dict[str, Any]:
        return {
            "guard": "dataflow",
            "labels": ["outward"],
            "private": {"tool": self.private.tool, "seconds_ago": round(now - self.private.at, 1)},
            "untrusted": {"tool": self.untrusted.tool, "seconds_ago": round(now - self.untrusted.at, 1)},
            "window_s": self.window_s,
            "action": self.action,
        }


def _ago(seconds: float) -> str:
    return f"{max(seconds, 0.0):.0f} s ago"


def tripped(private: Mark | None, untrusted: Mark | None, guard: Guard, now: float) -> Flow | None:
    """Both marks within the window (order irrelevant): the guard holds the outward call."""
    if private is None or untrusted is None:
        return None
    since = now - guard.window_s
    if private.at < since or untrusted.at < since:
        return None
    return Flow(private, untrusted, guard.window_s, guard.action)


def labels_in(r: SyncReader) -> tuple[dict[tuple[int, str], frozenset[str]], dict[int, Guard]]:
    """Every label row ((toolkit id, tool name or "") → labels) and every toolkit's guard."""
    labels = {
        (int(kit), name): frozenset(n for n, on in zip(LABELS, flags, strict=True) if on)
        for kit, name, *flags in r.all(
            "SELECT toolkit_id, tool_name, private, untrusted, outward FROM call_labels"
        )
    }
    guards = {
        int(kit): Guard(int(window), action, approver, "toolkit")
        for kit, window, action, approver in r.all(
            "SELECT toolkit_id, window_s, action, approver FROM dataflow_guards"
        )
    }
    return labels, guards


# -- shown and changed ---------------------------------------------------------------------


async def toolkit_labels(conn: ReadConn, toolkit_id: int) -> dict[str, Any]:
    """A toolkit's labels and its own guard setting (None: the appliance's), as faces show them."""
    rows = await conn.all(
        "SELECT tool_name, private, untrusted, outward FROM call_labels WHERE toolkit_id = ?"
        " ORDER BY tool_name",
        (toolkit_id,),
    )
    out: dict[str, Any] = {"toolkit": [], "tools": {}}
    for name, *flags in rows:
        found = [n for n, on in zip(LABELS, flags, strict=True) if on]
        if name:
            out["tools"][name] = found
        else:
            out["toolkit"] = found
    row = await conn.one(
        "SELECT window_s, action, approver FROM dataflow_guards WHERE toolkit_id = ?", (toolkit_id,)
    )
    guard = None if row is None else {"window_s": int(row[0]), "action": row[1], "approver": row[2]}
    return {"labels": out, "guard": guard}


def check_labels(value: Any) -> frozenset[str] | None:
    """A list of labels (an empty list: none), or None (remove: the toolkit's labels apply)."""
    if value is None:
        return None
    if not isinstance(value, list) or any(v not in LABELS for v in value):
        raise InvalidParams(
            "'labels' must be a list of 'private', 'untrusted', 'outward' (empty: none), or null (remove)",
            field="labels",
        )
    return frozenset(value)


def check_guard(value: Any, approver_of: Any) -> Guard | None:
    """The guard's setting ``{"window_s": …, "action": …, "approver": …}``, or None (remove)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"window_s", "action", "approver"}:
        raise InvalidParams(
            '\'dataflow\' must be {"window_s": seconds, "action": "approve" or "deny", "approver"}'
            " or null (the appliance's setting)",
            field="dataflow",
        )
    window = value.get("window_s")
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_WINDOW_S:
        raise InvalidParams(f"'window_s' must be whole seconds from 1 to {MAX_WINDOW_S}", field="window_s")
    action = value.get("action")
    if action not in GUARD_ACTIONS:
        raise InvalidParams("'action' must be 'approve' or 'deny'", field="action")
    return Guard(window, action, approver_of(value.get("approver"), action), "toolkit")


async def set_labels(tx: WriteTx, toolkit_id: int, tool_name: str, labels: frozenset[str] | None) -> None:
    if labels is None:
        await tx.run(
            "DELETE FROM call_labels WHERE toolkit_id = ? AND tool_name = ?", (toolkit_id, tool_name)
        )
        return
    await tx.run(
        "INSERT INTO call_labels (toolkit_id, tool_name, private, untrusted, outward) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (toolkit_id, tool_name) DO UPDATE SET private = excluded.private,"
        " untrusted = excluded.untrusted, outward = excluded.outward",
        (toolkit_id, tool_name, *(int(n in labels) for n in LABELS)),
    )


async def set_guard(tx: WriteTx, toolkit_id: int, guard: Guard | None) -> None:
    if guard is None:
        await tx.run("DELETE FROM dataflow_guards WHERE toolkit_id = ?", (toolkit_id,))
        return
    await tx.run(
        "INSERT INTO dataflow_guards (toolkit_id, window_s, action, approver) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (toolkit_id) DO UPDATE SET window_s = excluded.window_s, action = excluded.action,"
        " approver = excluded.approver",
        (toolkit_id, guard.window_s, guard.action, guard.approver),
    )
