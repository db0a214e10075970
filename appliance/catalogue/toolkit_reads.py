"""Questions the gateway asks about toolkits as a whole: which ids a slug and project name,
what is installed, each one's health, whether any visible toolkit has a guide.

Each is one statement over ``toolkits`` (and ``projects`` for the project's slug). A ``*_in``
function runs on a ``SyncReader`` inside a batch the gateway already holds; the others take
a ``ReadConn``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from appliance.db import ReadConn, SyncReader
from appliance.db.scope_sql import toolkit_clause
from appliance.models import Scope


def ids_in(reader: SyncReader, toolkit: str | None, project: str | None) -> set[int]:
    """The toolkits named ``toolkit`` in ``project`` (None for either: any)."""
    rows = reader.all(
        "SELECT k.id FROM toolkits k JOIN projects p ON p.id = k.project_id"
        " WHERE (?1 IS NULL OR k.slug = ?1) AND (?2 IS NULL OR p.slug = ?2)",
        (toolkit, project),
    )
    return {int(r[0]) for r in rows}


async def ids_of_slugs(conn: ReadConn, slugs: Sequence[str], project: str | None) -> set[int]:
    """The toolkits whose slug is one of ``slugs``, in ``project`` (None: any project)."""
    marks = ",".join("?" * len(slugs))
    sql = (
        "SELECT k.id FROM toolkits k JOIN projects p ON p.id = k.project_id"
        f" WHERE k.slug IN ({marks}) AND (? IS NULL OR p.slug = ?)"
    )
    rows = await conn.all(sql, [*slugs, project, project])
    return {int(r[0]) for r in rows}


async def installed(conn: ReadConn) -> list[tuple[str, str]]:
    """(slug, source) of every toolkit, in every project."""
    rows = await conn.all("SELECT slug, source FROM toolkits")
    return [(str(r[0]), str(r[1])) for r in rows]


async def healths(conn: ReadConn) -> list[Any]:
    """Every toolkit's ``id``, ``slug``, ``project`` (its slug) and ``health``."""
    return await conn.all(
        "SELECT k.id, k.slug, p.slug AS project, k.health FROM toolkits k JOIN projects p"
        " ON p.id = k.project_id"
    )


def any_guide_in(reader: SyncReader, scope: Scope) -> bool:
    """Whether a toolkit ``scope`` sees has a guide."""
    kit_filter, params = toolkit_clause(scope, "k")
    where = f" AND {kit_filter}" if kit_filter else ""
    return reader.one(f"SELECT 1 FROM toolkits k WHERE k.guide != ''{where} LIMIT 1", params) is not None
