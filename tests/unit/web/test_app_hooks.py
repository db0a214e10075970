"""The app's hooks run the runtime's serving order, whole, and nothing besides it.

Driven through Sanic's ASGI lifespan (in process): startup is the server's two start moments,
shutdown its two stop moments.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance import config
from appliance.web.app import create_app
from tests.support.servers import TEST_DEFAULTS
from tests.unit.gateway.test_lifecycle import OPENING, SERVING


class Lifespan:
    """A minimal ASGI server's lifespan half: startup, then shutdown."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._in: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        self._out: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def _say(self, kind: str) -> str:
        await self._in.put({"type": f"lifespan.{kind}"})
        async with asyncio.timeout(60):
            return (await self._out.get())["type"]

    async def startup(self) -> str:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}}
        self._task = asyncio.create_task(self.app(scope, self._in.get, self._out.put))
        return await self._say("startup")

    async def shutdown(self) -> str:
        answer = await self._say("shutdown")
        assert self._task is not None
        async with asyncio.timeout(60):
            await self._task
        return answer


@pytest.mark.filterwarnings("ignore:You have set the USE_UVLOOP")
def test_the_apps_hooks_start_the_whole_order_and_stop_all_of_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = create_app(
        config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path), **TEST_DEFAULTS}), name="lifecycle_hooks"
    )
    serving = app.ctx.serving
    assert serving.names == OPENING + SERVING
    assert serving.opening.started == () and serving.serving.started == ()  # nothing before start

    async def scenario() -> None:
        lifespan = Lifespan(app)
        assert await lifespan.startup() == "lifespan.startup.complete"
        assert serving.opening.started == OPENING
        assert serving.serving.started == SERVING
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            assert (await client.get("/health")).status_code == 200
        assert await lifespan.shutdown() == "lifespan.shutdown.complete"
        assert serving.opening.started == () and serving.serving.started == ()

    asyncio.run(scenario())
    assert "serving MCP on http://" in capsys.readouterr().out  # the ready line, once serving
