"""A real Runtime on a fresh data directory for one in-process test: opened, used, closed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from appliance import config
from appliance.gateway.runtime import Runtime
from appliance.models import Principal

T = TypeVar("T")


def on_runtime(
    tmp_path: Path,
    work: Callable[[Runtime], Awaitable[T]],
    *,
    timeout_s: float = 60,
    env: dict[str, str] | None = None,
) -> T:
    """``work`` on a Runtime over ``tmp_path / "data"`` (default settings, or those ``env``
    gives), within ``timeout_s``."""
    settings = config.load(cli={"data_dir": str(tmp_path / "data")}, env=env or {})

    async def main() -> T:
        rt = Runtime(settings)
        await rt.open()
        try:
            return await work(rt)
        finally:
            await rt.close()

    return asyncio.run(asyncio.wait_for(main(), timeout=timeout_s))


async def plain_user(rt: Runtime, name: str) -> Principal:
    """A new user without admin rights, as its own key would present it."""
    async with rt.db.write() as tx:
        row = await tx.one("INSERT INTO users (name, is_admin) VALUES (?, 0) RETURNING id", (name,))
    return Principal(user_id=int(row["id"]), name=name, is_admin=False, key_prefix=f"tsk_{name}")
