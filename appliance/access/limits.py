"""The hourly import limit: each user may start a set number of imports per sliding hour.

An import fetches and converts a whole spec (seconds of CPU for a large one), so one user
could otherwise keep the appliance busy for everyone. Counted per user in ``import_events``
inside the import's own transaction; the operator's CLI imports are not counted.
"""

from __future__ import annotations

import math

from appliance.db import WriteTx
from appliance.errors import RateLimited

WINDOW_S = 3600.0


async def record_import(tx: WriteTx, user_id: int, *, per_hour: int, now: float) -> None:
    """Count one import for ``user_id``, or refuse with the seconds to wait."""
    since = now - WINDOW_S
    await tx.run("DELETE FROM import_events WHERE user_id = ? AND at <= ?", (user_id, since))
    rows = await tx.all("SELECT at FROM import_events WHERE user_id = ? ORDER BY at", (user_id,))
    if per_hour <= 0 or len(rows) >= per_hour:
        # The wait ends when enough of the oldest imports leave the window for one more.
        oldest = float(rows[len(rows) - per_hour]["at"]) if per_hour > 0 and rows else now
        wait = max(1, math.ceil(oldest + WINDOW_S - now))
        raise RateLimited(
            f"import limit reached: {per_hour} imports per hour; try again in {wait} s",
            field="import",
            data={"retry_after_s": wait, "limit": per_hour, "window": "hour"},
        )
    await tx.run("INSERT INTO import_events (user_id, at) VALUES (?, ?)", (user_id, now))
