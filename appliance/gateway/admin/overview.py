"""The overview: what the appliance did lately, for the console's first page.

Calls per minute over the last hour (with errors and refusals), outcome rates and the top
tools over the last 24 hours, spend per toolkit and per caller over the last 24 hours and
30 days, and toolkit health at a glance. An admin sees every call and toolkit; a user the
calls they made and the calls to the toolkits they own, and their own toolkits' health
(the rule of ``ledgering.calls``: owners see their toolkits and themselves).

Everything is read in one hop to a reader thread; every list is cut to a fixed length, so
the page's size does not grow with the log.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from appliance.access import principals
from appliance.catalogue import toolkit_pages
from appliance.db import SyncReader
from appliance.ledger import activity
from appliance.ledger.amounts import credits
from appliance.ledger.windows import rfc3339
from appliance.models import Principal

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime

HOUR_S = 3600
DAY_S = 86_400
MONTH_S = 30 * DAY_S
MINUTES = 60
TOP = 10
UNHEALTHY_SHOWN = 10


def _rate(part: int, whole: int) -> float:
    return 0.0 if not whole else part / whole


def _minutes(found: dict[int, tuple[int, int, int]], now: float) -> list[dict[str, Any]]:
    last = int(now // 60)
    out = []
    for minute in range(last - MINUTES + 1, last + 1):
        calls, errors, refusals = found.get(minute, (0, 0, 0))
        out.append({"at": rfc3339(minute * 60), "calls": calls, "errors": errors, "refusals": refusals})
    return out


def _gather(r: SyncReader, actor: Principal, now: float) -> dict[str, Any]:
    owner = principals.managed_owner(actor)
    seen = activity.Seen()
    if owner is not None:
        seen = activity.Seen(owner, tuple(toolkit_pages.owned_ids_in(r, owner)))
    minutes = activity.per_minute_in(r, seen, now - MINUTES * 60)
    day = activity.outcomes_in(r, seen, now - DAY_S)
    top = activity.top_tools_in(r, seen, now - DAY_S, limit=TOP)
    by_kit = [
        {"key": row["toolkit_id"], "month_milli": row["total_milli"], "day_milli": row["recent_milli"]}
        for row in activity.spend_by_toolkit_in(r, seen, now - MONTH_S, now - DAY_S, limit=TOP)
    ]
    by_caller = [
        {
            "key": ("agent", row["agent_id"]) if row["agent_id"] is not None else ("user", row["user_id"]),
            "month_milli": row["total_milli"],
            "day_milli": row["recent_milli"],
        }
        for row in activity.spend_by_caller_in(r, seen, now - MONTH_S, now - DAY_S, limit=TOP)
    ]
    names = activity.names_in(
        r,
        toolkits=[t["toolkit_id"] for t in top if t["toolkit_id"] is not None]
        + [s["key"] for s in by_kit if s["key"] is not None],
        agents=[k[1] for k in (s["key"] for s in by_caller) if k[0] == "agent"],
        users=[k[1] for k in (s["key"] for s in by_caller) if k[0] == "user" and k[1] is not None],
    )
    unhealthy = []
    for health in ("broken", "degraded"):
        _, cards = toolkit_pages.page_in(
            r, toolkit_pages.Filters(owner_id=owner, health=health), offset=0, limit=UNHEALTHY_SHOWN
        )
        unhealthy += cards
    return {
        "minutes": _minutes(minutes, now),
        "day": day,
        "top": top,
        "by_kit": by_kit,
        "by_caller": by_caller,
        "names": names,
        "health": toolkit_pages.health_counts_in(r, owner),
        "unhealthy": unhealthy[:UNHEALTHY_SHOWN],
    }


def _kit_name(names: dict[str, dict[int, tuple[str, str]]], kit_id: int | None) -> dict[str, str]:
    slug, project = names["toolkits"].get(kit_id, ("", "")) if kit_id is not None else ("", "")
    return {"toolkit": slug or "(removed)", "project": project}


def _caller_name(names: dict[str, dict[int, tuple[str, str]]], key: tuple[str, int | None]) -> str:
    kind, one = key
    if kind == "agent" and one is not None:
        agent, user = names["agents"].get(one, ("", ""))
        return f"{agent or 'agent ' + str(one)} (of {user})" if user else agent or f"agent {one}"
    user = names["users"].get(one, ("", ""))[0] if one is not None else ""
    return f"{user or 'a removed user'} (own key)"


async def overview(rt: Runtime, actor: Principal, *, now: float | None = None) -> dict[str, Any]:
    """The overview's figures, each list bounded."""
    principals.require_person(actor)
    at = time.time() if now is None else now
    async with rt.db.read() as conn:
        found = await conn.batch(lambda r: _gather(r, actor, at))
    names = found["names"]
    day = found["day"]
    total = sum(day.values())
    errors = sum(day.get(o, 0) for o in activity.ERRORS)
    refusals = sum(day.get(o, 0) for o in activity.REFUSALS)
    hour = found["minutes"]
    return {
        "now": rfc3339(at),
        "minutes": hour,
        "hour": {
            "calls": sum(m["calls"] for m in hour),
            "errors": sum(m["errors"] for m in hour),
            "refusals": sum(m["refusals"] for m in hour),
        },
        "day": {
            "calls": total,
            "outcomes": dict(sorted(day.items())),
            "error_rate": _rate(errors, total),
            "refusal_rate": _rate(refusals, total),
        },
        "top_tools": [{**t, **_kit_name(names, t["toolkit_id"])} for t in found["top"]],
        "spend_by_toolkit": [
            {**_kit_name(names, s["key"]), "day": credits(s["day_milli"]), "month": credits(s["month_milli"])}
            for s in found["by_kit"]
        ],
        "spend_by_caller": [
            {
                "caller": _caller_name(names, s["key"]),
                "day": credits(s["day_milli"]),
                "month": credits(s["month_milli"]),
            }
            for s in found["by_caller"]
        ],
        "health": {h: found["health"].get(h, 0) for h in toolkit_pages.HEALTHS},
        "unhealthy": found["unhealthy"],
    }
