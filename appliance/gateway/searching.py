"""Search as every caller gets it: the bridge's search_tools, the CLI and `eval`."""

from __future__ import annotations

from appliance.access import visibility
from appliance.catalogue import store
from appliance.db import SyncReader
from appliance.gateway.runtime import Runtime
from appliance.models import Principal, Tool
from appliance.search import fts


async def search_tools(
    rt: Runtime,
    query: str,
    *,
    principal: Principal | None = None,
    toolkit: str | None = None,
    project: str | None = None,
    limit: int | None = None,
    max_limit: int | None = None,
) -> tuple[list[Tool], str]:
    """Best tools for ``query`` among those ``principal`` may call, best first, and the name of
    the ranking that served them. No principal: the operator's view (CLI without a key, eval).

    ``max_limit`` lifts the agent-facing cap for `toolspoke eval`, which scores the top 100.
    """
    settings = rt.settings
    cap = max_limit or settings.search_max_limit
    n = max(1, min(limit or settings.search_default_limit, cap))

    def ranked(reader: SyncReader) -> list[Tool]:
        # The caller's scope, the ranking and loading the tools share one hop to the reader's
        # thread; the scope sits in the ranking statement's WHERE, so a page is never short.
        scope = None if principal is None else visibility.scope_in(reader, principal)
        hits = fts.search_in(reader, query, limit=n, toolkit=toolkit, project=project, scope=scope)
        return store.tools_by_ids_in(reader, [tool_id for tool_id, _ in hits], scope=scope)

    async with rt.db.read() as conn:
        tools = await conn.batch(ranked)
    return tools, "lexical"
