"""Many sealed credentials at once, for rotation tests and figures."""

from __future__ import annotations

from typing import Any

from appliance.vault import store


async def seed_credentials(rt: Any, count: int) -> None:
    """``count`` catalogue toolkits ``seed-<i>``, each with a sealed bearer credential, in one transaction."""
    async with rt.db.write() as tx:
        for i in range(count):
            kit = await tx.run(
                "INSERT INTO toolkits (project_id, slug, source_kind) VALUES (1, ?, 'catalog')",
                (f"seed-{i}",),
            )
            await store.put(tx, rt.vault, kit, "bearer", {}, {"token": f"seed-token-{i:08d}"})
