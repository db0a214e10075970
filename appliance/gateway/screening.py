"""Screening at import and re-sync: every fresh tool's findings, before it is stored.

The text of each tool is screened off the event loop (a spec of thousands of operations takes
a fraction of a second), before the write transaction; the names are compared with every
installed toolkit's inside it, so two imports committing one after the other see each other.
``TOOLSPOKE_SCREEN_TOOLS=false`` turns the holding off (None all the way down: nothing
recorded, nothing held); invisible characters are removed from what agents see regardless
(``catalogue/store``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from appliance.catalogue import sync_store
from appliance.catalogue.screening import Finding, NameIndex, as_rows, merge, reveal, screen_tool
from appliance.db import ReadConn
from appliance.gateway.runtime import Runtime
from appliance.models import ToolDraft

__all__ = ["held", "reveal", "texts", "with_names"]  # reveal: for the faces that print upstream text

Findings = dict[str, list[Finding]]
Rows = dict[str, list[dict[str, str]]]
# Below this many tools the text is screened on the loop: a thread hop costs more.
_INLINE = 50


def _texts(tools: Sequence[ToolDraft]) -> Findings:
    return {
        t.upstream_name: screen_tool(
            t.upstream_name, t.title, t.description, t.input_schema, annotations=t.annotations
        )
        for t in tools
    }


async def texts(rt: Runtime, tools: Sequence[ToolDraft]) -> Findings | None:
    """Each tool's own findings by upstream name (None: screening is off)."""
    if not rt.settings.screen_tools:
        return None
    if len(tools) < _INLINE:
        return _texts(tools)
    return await asyncio.to_thread(_texts, tools)


async def with_names(
    conn: ReadConn, slug: str, tools: Sequence[ToolDraft], found: Findings | None
) -> Rows | None:
    """``found`` with the imitation findings among the installed toolkits, as stored rows."""
    if found is None:
        return None
    index = NameIndex(await sync_store.installed_names(conn))
    names = index.imitations(slug, [t.upstream_name for t in tools])
    return {
        t.upstream_name: as_rows(merge(found.get(t.upstream_name, []), names.get(t.upstream_name, [])))
        for t in tools
    }


def held(tools: Sequence[ToolDraft], rows: Rows | None) -> list[dict[str, object]]:
    """The tools the screening holds pending, with the reasons (for an import's report)."""
    if rows is None:
        return []
    return [{"name": t.name, "screening": rows[t.upstream_name]} for t in tools if rows.get(t.upstream_name)]
