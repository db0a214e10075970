"""The overview's sums over the audit log (ledger/activity.py) read migration 18's covering
indexes alone, whoever the viewer: the hour and the day a range over ``audit_overview``, the
30 days of spend a pass over a paid-rows index in group order, with no sort and never a
lookup of the table's rows."""

from __future__ import annotations

import asyncio
from pathlib import Path

from appliance import config
from appliance.gateway.runtime import Runtime
from appliance.ledger import activity


def test_every_overview_statement_is_a_covering_range_over_the_time_index(tmp_path: Path) -> None:
    plans: list[str] = []

    class Explaining:
        """A reader that answers each statement with its query plan."""

        def __init__(self, real: object) -> None:
            self.real = real

        def all(self, sql: str, params: object = ()) -> list[object]:
            plans.append(
                " / ".join(str(row[3]) for row in self.real.all("EXPLAIN QUERY PLAN " + sql, params))
            )  # type: ignore[attr-defined]
            return []

    async def main() -> None:
        rt = Runtime(config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path), "TOOLSPOKE_DEMO": "0"}))
        await rt.open()
        try:
            for seen in (activity.Seen(), activity.Seen(7, (1, 2, 3))):

                def read(r: object, seen: activity.Seen = seen) -> None:
                    fake = Explaining(r)
                    activity.per_minute_in(fake, seen, 0.0)  # type: ignore[arg-type]
                    activity.outcomes_in(fake, seen, 0.0)  # type: ignore[arg-type]
                    activity.top_tools_in(fake, seen, 0.0)  # type: ignore[arg-type]
                    activity.spend_by_toolkit_in(fake, seen, 0.0, 1.0)  # type: ignore[arg-type]
                    activity.spend_by_caller_in(fake, seen, 0.0, 1.0)  # type: ignore[arg-type]

                async with rt.db.read() as conn:
                    await conn.batch(read)
        finally:
            await rt.close()

    asyncio.run(main())
    assert len(plans) == 10
    for i, plan in enumerate(plans):
        if i % 5 < 3:  # the hour and the day: a range over the time
            assert "SEARCH audit_log USING COVERING INDEX audit_overview (at>?)" in plan, plan
        else:  # 30 days of spend: the paid rows in group order, nothing sorted
            assert "SCAN audit_log USING COVERING INDEX audit_spend_by_" in plan, plan
            assert "TEMP B-TREE FOR GROUP BY" not in plan, plan
        assert "SCAN audit_log " not in plan.replace("SCAN audit_log USING COVERING INDEX", ""), plan
