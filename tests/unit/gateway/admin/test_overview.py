"""The overview's figures (gateway/admin/overview.py over ledger/activity.py), in a real
database with audit rows written at known times: calls per minute over the last hour, rates
over 24 hours, top tools, spend per toolkit and caller over 24 hours and 30 days; a user's
figures count only their own calls and the calls to their toolkits; every list is bounded."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from appliance.gateway.admin import overview
from appliance.gateway.runtime import Runtime
from appliance.models import Principal
from tests.support import worlds
from tests.support.worlds import KitSpec, World

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
WORLD = World(
    users=[False, False],  # u0 owns alpha, u1 owns beta
    agents=[0, 1],
    kits=[KitSpec("alpha", "default", owner=0), KitSpec("beta", "default", owner=1, visibility="published")],
)
COLUMNS = (
    "at, user_id, user_name, agent_id, agent_name, toolkit_id, toolkit, project, tool, outcome, fee_milli"
)


def run(tmp_path: Path, body: Callable[[Runtime, worlds.Built, list[Any]], Awaitable[Any]]) -> Any:
    async def with_rows(rt: Runtime, built: worlds.Built, people: list[Any]) -> Any:
        async with rt.db.write() as tx:
            await tx.run_many(
                f"INSERT INTO audit_log ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows(built)
            )
        return await body(rt, built, people)

    return worlds.run_in(tmp_path, WORLD, with_rows)


def rows(built: worlds.Built) -> list[tuple[Any, ...]]:
    u0, u1 = built.user_ids
    a0, a1 = built.agent_ids
    alpha, beta = built.kit_ids
    out: list[tuple[Any, ...]] = []
    # a0 (of u0) calls beta (u1's) three times a minute ago, once failing, paying 0.5 each
    for outcome in ("ok", "ok", "upstream_error"):
        out.append((NOW - 61, u0, "u0", a0, "a0", beta, "beta", "default", "beta__t0", outcome, 500))
    # u1 calls beta itself (free) and is refused once, 10 minutes ago
    out.append((NOW - 600, u1, "u1", None, None, beta, "beta", "default", "beta__t0", "ok", 0))
    out.append((NOW - 600, u1, "u1", None, None, beta, "beta", "default", "beta__t0", "quota", 0))
    # a1 (of u1) calls alpha (u0's) two days ago: in the month, not the day
    out.append((NOW - 2 * 86_400, u1, "u1", a1, "a1", alpha, "alpha", "default", "alpha__t0", "ok", 2000))
    # 40 days ago: outside everything
    out.append((NOW - 40 * 86_400, u1, "u1", a1, "a1", alpha, "alpha", "default", "alpha__t0", "ok", 9000))
    # twelve distinct tools an hour and a half ago: top tools stop at ten
    out += [
        (NOW - 5400, u0, "u0", None, None, alpha, "alpha", "default", f"alpha__x{i:02d}", "ok", 0)
        for i in range(12)
    ]
    return out


def test_an_admin_sees_every_call_summed_by_minute_day_and_month(tmp_path: Path) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Any]) -> None:
        admin = Principal(user_id=0, name="root", is_admin=True, key_prefix="", operator=True)
        found = await overview.overview(rt, admin, now=NOW)
        minutes = found["minutes"]
        assert len(minutes) == 60 and minutes[-1]["at"] == "2027-01-15T08:00:00Z"
        assert [(m["calls"], m["errors"]) for m in minutes if m["calls"]] == [(2, 0), (3, 1)]
        assert found["hour"] == {"calls": 5, "errors": 1, "refusals": 1}
        assert found["day"]["calls"] == 17
        assert found["day"]["refusal_rate"] == 1 / 17 and found["day"]["error_rate"] == 1 / 17
        assert len(found["top_tools"]) == 10
        assert found["top_tools"][0] == {
            "toolkit_id": built.kit_ids[1],
            "tool": "beta__t0",
            "calls": 5,
            "not_ok": 2,
            "toolkit": "beta",
            "project": "default",
        }
        assert found["spend_by_toolkit"] == [
            {"toolkit": "alpha", "project": "default", "day": 0, "month": 2},
            {"toolkit": "beta", "project": "default", "day": 1.5, "month": 1.5},
        ]
        assert found["spend_by_caller"] == [
            {"caller": "a1 (of u1)", "day": 0, "month": 2},
            {"caller": "a0 (of u0)", "day": 1.5, "month": 1.5},
        ]
        assert found["health"] == {"active": 2, "degraded": 0, "broken": 0, "starting": 0}

    run(tmp_path, body)


def test_a_user_sees_their_own_calls_and_the_calls_to_their_toolkits_only(tmp_path: Path) -> None:
    async def body(rt: Runtime, built: worlds.Built, people: list[Any]) -> None:
        u0, u1 = people[:2]
        mine = await overview.overview(rt, u0, now=NOW)
        # u0: a0's three calls (hers) and a1's call to alpha (her toolkit), not u1's own calls
        assert mine["hour"]["calls"] == 3 and mine["day"]["calls"] == 15
        assert {s["caller"] for s in mine["spend_by_caller"]} == {"a0 (of u0)", "a1 (of u1)"}
        theirs = await overview.overview(rt, u1, now=NOW)
        assert theirs["hour"] == {"calls": 5, "errors": 1, "refusals": 1}  # all to beta, u1's
        assert [t["tool"] for t in theirs["top_tools"]] == ["beta__t0"]  # a1's call to alpha: 2 days ago
        assert theirs["health"]["active"] == 1

    run(tmp_path, body)
