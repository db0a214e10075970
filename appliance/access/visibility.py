"""May P see / call T: the one place the rules are written down, as a ``Scope``.

The rules (issue 4):

- A user *reaches* the toolkits they own, every published toolkit and every platform
  default; an admin also reaches the platform's own toolkits (no owner).
- A user's own key sees exactly what the user reaches.
- An agent's key sees a reached toolkit when the agent holds an enabled grant on it, or when
  it is a platform default and the agent has not opted out (a disabled grant). A grant on a
  toolkit the user does not reach gives nothing: grants only narrow.
- A grant of selected tools shows only those tools; a toolkit's allow-list (when not empty)
  limits every caller to those tools; pending and disabled tools exist for nobody (the
  catalogue filters ``state`` itself).
- A narrowed key (issue 20) sees only what its narrowing names (whole toolkits, or some of
  their tools) *and* what its agent (or user) sees now: the intersection, so a grant taken
  from the agent after the key was made is gone from the key too. A narrowed key whose
  every toolkit was removed sees nothing.
- A caller without a key (``anonymous``) sees published toolkits only, and may not call.
- The operator (CLI without a key) sees everything.

Everything is decided in one reader hop and kept in the reader's memo, which the cache
generation (``db/generation.py``) clears on any commit that changed access: a revoked grant
counts from the next request on.
"""

from __future__ import annotations

from typing import Any

from appliance.db import ReadConn, SyncReader, dumps
from appliance.models import EVERYTHING, Principal, Scope

_MEMO = "access_scopes"
_MEMO_MAX = 10_000


async def scope(conn: ReadConn, principal: Principal) -> Scope:
    return await conn.batch(lambda r: scope_in(r, principal))


def scope_in(r: SyncReader, principal: Principal) -> Scope:
    """The principal's scope, from the reader's memo when nothing changed since."""
    if principal.operator:
        return EVERYTHING
    memo: dict[tuple[Any, ...], Scope] = r.memo.setdefault(_MEMO, {})
    narrowing = principal.key_prefix if principal.narrowed else None
    key = (principal.user_id, principal.agent_id, principal.is_admin, principal.anonymous, narrowing)
    found = memo.get(key)
    if found is None:
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        found = memo[key] = compute(r, principal)
    return found


def compute(r: SyncReader, p: Principal) -> Scope:
    """The principal's scope, read now (no memo: a write transaction's checks use it)."""
    if p.operator:
        return EVERYTHING
    visible: list[tuple[int, int | None]]  # (toolkit id, the grant that shows it, if any)
    if p.anonymous:
        rows = r.all("SELECT id, NULL AS grant_id FROM toolkits WHERE visibility = 'published'")
        visible = [(int(row[0]), None) for row in rows]
    else:
        rows = r.all(
            "SELECT k.id, k.is_default, g.id AS grant_id, g.enabled FROM toolkits k"
            " LEFT JOIN grants g ON g.toolkit_id = k.id AND g.agent_id = ?"
            " WHERE k.owner_id = ? OR k.visibility = 'published' OR k.is_default = 1"
            " OR (k.owner_id IS NULL AND ? = 1)",
            (p.agent_id, p.user_id, int(p.is_admin)),
        )
        if p.agent_id is None:
            visible = [(int(row[0]), None) for row in rows]
        else:
            visible = [
                (int(row[0]), int(row[2]) if row[2] is not None else None)
                for row in rows
                if row[3] == 1 or (row[1] == 1 and row[2] is None)
            ]
    kit_ids = [kit for kit, _ in visible]
    grant_ids = [g for _, g in visible if g is not None]
    names = _restrictions(r, kit_ids, grant_ids)
    if p.narrowed:
        kit_ids, names = _narrowed(r, p.key_prefix, kit_ids, names)
    restricted: dict[int, frozenset[int]] = {}
    if names:
        pairs = [[kit, name] for kit, allowed in names.items() for name in allowed]
        ids: dict[int, set[int]] = {kit: set() for kit in names}
        for row in r.all(
            "SELECT t.toolkit_id, t.id FROM json_each(?) j JOIN tools t"
            " ON t.toolkit_id = json_extract(j.value, '$[0]') AND t.name = json_extract(j.value, '$[1]')",
            (_json(pairs),),
        ):
            ids[int(row[0])].add(int(row[1]))
        restricted = {kit: frozenset(found) for kit, found in ids.items()}
    return Scope(toolkits=frozenset(kit_ids), restricted=restricted)


def _restrictions(r: SyncReader, kit_ids: list[int], grant_ids: list[int]) -> dict[int, set[str]]:
    """Toolkit id → the tool names a caller is limited to (allow-list ∩ grant's selection)."""
    if not kit_ids:
        return {}
    out: dict[int, set[str]] = {}
    for row in r.all(
        "SELECT toolkit_id, tool_name FROM toolkit_allowed_tools"
        " WHERE toolkit_id IN (SELECT value FROM json_each(?))",
        (_json(kit_ids),),
    ):
        out.setdefault(int(row[0]), set()).add(row[1])
    if grant_ids:
        selected: dict[int, set[str]] = {}
        for row in r.all(
            "SELECT g.toolkit_id, gt.tool_name FROM grant_tools gt JOIN grants g ON g.id = gt.grant_id"
            " WHERE gt.grant_id IN (SELECT value FROM json_each(?))",
            (_json(grant_ids),),
        ):
            selected.setdefault(int(row[0]), set()).add(row[1])
        for kit, chosen in selected.items():
            out[kit] = out[kit] & chosen if kit in out else chosen
    return out


def _narrowed(
    r: SyncReader, prefix: str, kit_ids: list[int], names: dict[int, set[str]]
) -> tuple[list[int], dict[int, set[str]]]:
    """The scope so far cut to the key's narrowing: toolkits it names, tools it names."""
    whole: set[int] = set()
    chosen: dict[int, set[str]] = {}
    for kit, name in r.all(
        "SELECT s.toolkit_id, s.tool_name FROM api_key_scopes s JOIN api_keys k ON k.id = s.key_id"
        " WHERE k.prefix = ?",
        (prefix,),
    ):
        if name:
            chosen.setdefault(int(kit), set()).add(name)
        else:
            whole.add(int(kit))
    kept = [kit for kit in kit_ids if kit in whole or kit in chosen]
    out = {kit: allowed for kit, allowed in names.items() if kit in kept}
    for kit in kept:
        if kit not in whole:  # some of its tools only (a whole-toolkit row covers them all)
            out[kit] = out[kit] & chosen[kit] if kit in out else set(chosen[kit])
    return kept, out


def _json(value: Any) -> str:
    return dumps(value)
