"""Toolkits as their managers page through them: one card per toolkit, filtered, counted.

One statement for the page and one for the total, whatever the page size: a card's tool and
pending counts are correlated counts over ``tools_by_state`` (toolkit, state), so a page of
24 cards over 10,000 tools costs the same as over 100. The filters are the manager's own
(owner, project, type, health, text); who may manage what is the access room's rule, handed
in as ``owner_id``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.db import SyncReader

# What the console calls a toolkit's type: an MCP toolkit is remote (HTTP or SSE) or local
# (a stdio child), from its connection; the others are what their source was (a toolkit
# inferred from endpoint examples is an OpenAPI one, with ``inferred`` on its card).
TYPES = ("openapi", "remote", "local", "catalog", "lore")
HEALTHS = ("active", "degraded", "broken", "starting")
_TYPE_SQL = (
    "CASE WHEN k.source_kind = 'mcp' THEN CASE json_extract(k.connection, '$.transport')"
    " WHEN 'stdio' THEN 'local' ELSE 'remote' END ELSE k.source_kind END"
)
_CARD = (
    "SELECT k.id, k.slug, p.slug AS project, k.title, k.description, k.health, k.health_reason,"
    f" k.health_changed_at, k.visibility, k.is_default, k.owner_id, u.name AS owner, {_TYPE_SQL} AS type,"
    " (SELECT count(*) FROM tools t WHERE t.toolkit_id = k.id AND t.state = 'active') AS tools,"
    " (SELECT count(*) FROM tools t WHERE t.toolkit_id = k.id AND t.state = 'pending') AS pending,"
    " coalesce(json_extract(k.meta, '$.inferred'), 0) AS inferred"
)
_FROM = " FROM toolkits k JOIN projects p ON p.id = k.project_id LEFT JOIN users u ON u.id = k.owner_id"


@dataclass(frozen=True)
class Filters:
    """What a page of cards is narrowed to; None (or empty text) leaves a filter off."""

    owner_id: int | None = None  # None: every owner's (an admin's view)
    project: str | None = None
    type: str | None = None
    health: str | None = None
    text: str = ""


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _where(f: Filters) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if f.owner_id is not None:
        clauses.append("k.owner_id = ?")
        params.append(f.owner_id)
    if f.project is not None:
        clauses.append("p.slug = ?")
        params.append(f.project)
    if f.type is not None:
        clauses.append(f"{_TYPE_SQL} = ?")
        params.append(f.type)
    if f.health is not None:
        clauses.append("k.health = ?")
        params.append(f.health)
    if f.text:
        clauses.append("(k.slug LIKE ? ESCAPE '\\' OR k.title LIKE ? ESCAPE '\\')")
        params += [_like(f.text), _like(f.text)]
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def _card(row: Any) -> dict[str, Any]:
    return {
        "id": int(row["id"]),
        "slug": row["slug"],
        "project": row["project"],
        "title": row["title"] or row["slug"],
        "description": row["description"],
        "type": row["type"],
        "health": row["health"],
        "health_reason": row["health_reason"],
        "health_since": row["health_changed_at"],
        "visibility": row["visibility"],
        "default": bool(row["is_default"]),
        "owner_id": row["owner_id"],
        "owner": row["owner"],
        "tools": int(row["tools"]),
        "pending": int(row["pending"]),
        "inferred": bool(row["inferred"]),
    }


def page_in(r: SyncReader, f: Filters, *, offset: int, limit: int) -> tuple[int, list[dict[str, Any]]]:
    """The total that match ``f`` and the cards of one page, by project and slug."""
    where, params = _where(f)
    total = int(r.one(f"SELECT count(*) AS n{_FROM}{where}", params)["n"])
    # The page's ids first, then its cards: sorting the cards themselves would count the tools
    # of every matching toolkit, not only of the page's.
    rows = r.all(
        f"{_CARD}{_FROM} WHERE k.id IN (SELECT k.id{_FROM}{where}"
        " ORDER BY p.slug, k.slug LIMIT ? OFFSET ?) ORDER BY p.slug, k.slug",
        [*params, limit, offset],
    )
    return total, [_card(row) for row in rows]


def card_in(r: SyncReader, slug: str, project: str) -> dict[str, Any] | None:
    """One toolkit's card and its usage guide (whoever may see it is the caller's question)."""
    row = r.one(f"{_CARD}, k.guide{_FROM} WHERE k.slug = ? AND p.slug = ?", (slug, project))
    return None if row is None else {**_card(row), "guide": row["guide"]}


def projects_in(r: SyncReader, owner_id: int | None) -> list[str]:
    """The projects that hold a toolkit of ``owner_id`` (None: any), for the project filter."""
    if owner_id is None:
        rows = r.all(
            "SELECT DISTINCT p.slug FROM projects p JOIN toolkits k ON k.project_id = p.id ORDER BY 1"
        )
    else:
        rows = r.all(
            "SELECT DISTINCT p.slug FROM projects p JOIN toolkits k ON k.project_id = p.id"
            " WHERE k.owner_id = ? ORDER BY 1",
            (owner_id,),
        )
    return [row[0] for row in rows]


def tools_in(r: SyncReader, toolkit_id: int) -> list[dict[str, Any]]:
    """Every tool of a toolkit in every state, as its manager reviews them."""
    rows = r.all(
        "SELECT t.name, t.upstream_name, t.title, t.description, t.state,"
        " COALESCE(t.kind_override, t.kind) AS kind, t.kind_override IS NOT NULL AS overridden"
        " FROM tools t WHERE t.toolkit_id = ?"
        " ORDER BY CASE t.state WHEN 'pending' THEN 0 WHEN 'active' THEN 1 ELSE 2 END, t.name",
        (toolkit_id,),
    )
    return [
        {
            "name": row["name"],
            "upstream_name": row["upstream_name"],
            "title": row["title"],
            "description": row["description"],
            "state": row["state"],
            "kind": row["kind"],
            "overridden": bool(row["overridden"]),
        }
        for row in rows
    ]


def health_counts_in(r: SyncReader, owner_id: int | None) -> dict[str, int]:
    """How many toolkits (of ``owner_id``; None: all) are in each health state."""
    if owner_id is None:
        rows = r.all("SELECT health, count(*) FROM toolkits GROUP BY health")
    else:
        rows = r.all("SELECT health, count(*) FROM toolkits WHERE owner_id = ? GROUP BY health", (owner_id,))
    return {row[0]: int(row[1]) for row in rows}


def owned_ids_in(r: SyncReader, owner_id: int) -> list[int]:
    return [int(row[0]) for row in r.all("SELECT id FROM toolkits WHERE owner_id = ?", (owner_id,))]
