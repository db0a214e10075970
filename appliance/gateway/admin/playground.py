"""The search playground: ``search_tools`` as the viewer, or as one of the agents they manage
(an admin: any agent), with why each result ranked where it did.

The search is the agents' own (``gateway/searching.search`` with the arguments
``agent_search`` gives it for a plain ``query``), under the principal the agent's keys act
for, so the results are exactly that agent's: its grants, opt-outs, allow-lists and the
semantic switch applied. Only the explanation is added.

Beside it, the recent misses (``recent_misses``): agents' searches that led to no call of any
result within the usage window, from the usage log (``gateway/usage.py``): a user sees those of
their own key and agents, an admin everyone's. Their text is the agents' and is shown escaped.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from appliance.access import principals
from appliance.errors import InvalidParams
from appliance.gateway import searching
from appliance.gateway.admin.agent_pages import agent_principal
from appliance.models import Principal
from appliance.search import usage

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime

# Recent misses the playground lists.
MISSES_SHOWN = 20
# Names of a miss's answer shown beside it.
MISS_RESULTS = 3

# Why the semantic pass did not join, in words (``searching.Outcome.reason``).
REASONS = {
    "switched_off": "semantic search is switched off (Settings)",
    "not_embedded": "a toolkit this search covers is not embedded yet (backfill in progress)",
    "provider_unavailable": "the embedding provider did not answer",
    "no_provider": "no embedding provider is configured",
}


def _why(r: searching.Explained, ranking: str) -> str:
    """One sentence on where a result's place came from."""
    lexical = (
        f"lexical #{r.lexical_rank} (BM25 {r.lexical_score:.2f})"
        if r.lexical_rank is not None and r.lexical_score is not None
        else ""
    )
    semantic = (
        f"semantic #{r.semantic_rank} (cosine {r.semantic_score:.3f})"
        if r.semantic_rank is not None and r.semantic_score is not None
        else ""
    )
    if ranking == "lexical":
        return f"{lexical}: ranked by its words alone" if lexical else "ranked by its words alone"
    parts = _parts(r)
    if lexical and semantic:
        return f"{lexical} and {semantic}, fused{parts}"
    if semantic:
        return f"{semantic}; no word of the query matched it, so it placed by meaning alone{parts}"
    return f"{lexical}; not among the nearest by meaning, so it placed by its words alone{parts}"


def _parts(r: searching.Explained) -> str:
    """What each term gave the fused score, e.g. ``: words +0.52, meaning +0.31, service +0.12``
    (and, for a request of several asks, ``its best ask``: search/asks.py)."""
    if r.lexical_part is None or r.semantic_part is None:
        return ""
    terms = [f"words {r.lexical_part:+.2f}", f"meaning {r.semantic_part:+.2f}"]
    if r.service_part:
        terms.append(f"its service {r.service_part:+.2f}")
    if r.ask_part is not None:
        terms.append(f"its best ask {r.ask_part:+.2f}")
    if r.usage_part:
        terms.append(f"observed use {r.usage_part:+.2f}")
    return ": " + ", ".join(terms)


async def search(
    rt: Runtime, actor: Principal, query: str, *, agent_id: int | None = None, limit: int | None = None
) -> dict[str, Any]:
    """``{"as", "ranking", "reason", "results"}``: each result's tool and its explanation."""
    principals.require_person(actor)
    acting = actor if agent_id is None else await agent_principal(rt, actor, agent_id)
    searching.check_query(query, "q")
    cap = rt.settings.search_max_limit
    n = rt.settings.search_default_limit if limit is None else limit
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= cap:
        raise InvalidParams(f"'limit' must be a whole number from 1 to {cap}", field="limit")
    who = acting.name if acting.agent_id is None else f"agent {acting.agent_name} (of {acting.name})"
    if not query.strip():
        return {"acting_as": who, "ranking": "", "reason": "", "results": []}
    # the arguments agent_search._one passes for a plain query (no tags, no known fields)
    outcome = await searching.search(rt, query, limit=n, max_limit=max(n, cap), principal=acting)
    return {
        "acting_as": who,
        "ranking": outcome.ranking,
        "reason": REASONS.get(outcome.reason, outcome.reason),
        "results": [
            {
                "name": r.tool.name,
                "toolkit": r.tool.toolkit,
                "project": r.tool.project,
                "description": r.tool.description,
                "score": r.score,
                "lexical_rank": r.lexical_rank,
                "lexical_score": r.lexical_score,
                "semantic_rank": r.semantic_rank,
                "semantic_score": r.semantic_score,
                "lexical_part": r.lexical_part,
                "semantic_part": r.semantic_part,
                "service_part": r.service_part,
                "ask_part": r.ask_part,
                "why": _why(r, outcome.ranking),
            }
            for r in outcome.results
        ],
    }


async def recent_misses(rt: Runtime, viewer: Principal, *, limit: int = MISSES_SHOWN) -> list[dict[str, Any]]:
    """The newest searches that led to no call, newest first: the viewer's own key's and
    agents' (an admin: everyone's). Each with who asked, when, and the first names it showed."""
    principals.require_person(viewer)
    user = None if viewer.is_admin else viewer.user_id
    async with rt.db.read() as conn:
        rows = await conn.batch(lambda r: usage.misses_in(r, user_id=user, limit=limit))
    return [
        {
            "at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(m.at)),
            "who": m.principal,
            "query": m.query,
            "shown": m.results[:MISS_RESULTS],
            "more": max(0, len(m.results) - MISS_RESULTS),
        }
        for m in rows
    ]
