"""Many sealed credentials at once, for rotation tests and figures."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from appliance import config
from appliance.gateway.runtime import Runtime
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


def seed_offline(data: Path, count: int) -> None:
    """``seed_credentials`` into an initialised data directory no server has open."""
    settings = config.load(env={"TOOLSPOKE_DATA_DIR": str(data)})

    async def main() -> None:
        rt = Runtime(settings)
        await rt.open()
        try:
            await seed_credentials(rt, count)
        finally:
            await rt.close()

    asyncio.run(main())
