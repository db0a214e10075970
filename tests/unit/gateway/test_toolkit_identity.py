"""Nothing kept for a toolkit outlives it: a new toolkit never inherits a removed one's state.

Observed: after removing a broken toolkit and importing another, calls to the new one were
refused as broken for about a minute while ``list_toolkits`` said active. Toolkit ids were
reused (SQLite hands out the largest id + 1) and health is kept by id, in the serving process,
whichever process did the removing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from appliance import config
from appliance.gateway import calls, imports, pipeline
from appliance.gateway.health_machine import Health, Outcome
from appliance.gateway.runtime import Runtime
from appliance.models import OPERATOR
from tests.support import tiny_stdio
from tests.support.servers import SANDBOX_READ_PATHS


def _runtime(data: Path) -> Runtime:
    env = {"TOOLSPOKE_DATA_DIR": str(data), "PATH": os.environ["PATH"]}
    return Runtime(config.load(env={**env, "TOOLSPOKE_STDIO_SANDBOX_READ_PATHS": SANDBOX_READ_PATHS}))


def _two_processes(
    tmp_path: Path, body: Callable[[Runtime, Runtime, dict[str, Any]], Awaitable[None]]
) -> None:
    """``body(serving, cli, connection)``: two runtimes on one data directory, as `serve` and
    a CLI command beside it are; probes running in the serving one (health enforced)."""
    connection = tiny_stdio.connection()

    async def main() -> None:
        serving, cli = _runtime(tmp_path / "data"), _runtime(tmp_path / "data")
        await serving.open()
        await cli.open()
        serving.health.enforcing = True  # as while `serve` runs its probes
        try:
            async with asyncio.timeout(60):
                await body(serving, cli, connection)
        finally:
            await cli.close()
            await serving.close()

    asyncio.run(main())


async def _toolkit_id(rt: Runtime, slug: str) -> int:
    tool = await calls.resolve_tool(rt, OPERATOR, f"{slug}__hello")
    return tool.toolkit_id


@pytest.mark.parametrize("remover", ["cli", "serving"])
def test_a_toolkit_imported_after_a_broken_one_was_removed_is_called_not_refused(
    tmp_path: Path, remover: str
) -> None:
    async def body(serving: Runtime, cli: Runtime, connection: dict[str, Any]) -> None:
        await imports.import_mcp(cli, connection, slug="broken")
        old = await _toolkit_id(serving, "broken")
        assert (await pipeline.call_tool(serving, OPERATOR, "broken__hello", {})).is_error is False
        serving.health.observe(old, Outcome.FATAL, "it kept crashing")  # what the probes found
        refused = await pipeline.call_tool(serving, OPERATOR, "broken__hello", {})
        assert refused.is_error is True and refused.meta["reason"] == "upstream_broken"

        await imports.remove_toolkit(cli if remover == "cli" else serving, "broken")
        await imports.import_mcp(cli, connection, slug="fresh")
        first = await pipeline.call_tool(serving, OPERATOR, "fresh__hello", {})
        assert first.is_error is False, first.content
        new = await _toolkit_id(serving, "fresh")
        assert new != old  # the removed toolkit's id is never handed out again
        assert serving.health.get(new) is None or serving.health.get(new).health is not Health.BROKEN  # type: ignore[union-attr]

    _two_processes(tmp_path, body)


def test_removing_a_toolkit_drops_what_this_process_kept_for_it(tmp_path: Path) -> None:
    """Health state, the pooled session, the stdio child and its back-off all go."""

    async def body(serving: Runtime, cli: Runtime, connection: dict[str, Any]) -> None:
        await imports.import_mcp(serving, connection, slug="kit")
        kit = await _toolkit_id(serving, "kit")
        assert (await pipeline.call_tool(serving, OPERATOR, "kit__hello", {})).is_error is False
        serving.health.observe(kit, Outcome.FATAL, "broken")
        assert serving.mcp.pooled("default.kit") is not None
        assert serving.mcp.processes.get("default.kit") is not None

        await imports.remove_toolkit(serving, "kit")
        assert serving.health.get(kit) is None
        assert serving.mcp.pooled("default.kit") is None
        assert serving.mcp.processes.get("default.kit") is None

    _two_processes(tmp_path, body)


def test_a_replaced_mcp_toolkit_is_judged_afresh(tmp_path: Path) -> None:
    """A replace keeps the toolkit (same id: approvals, grants and history stay), but the
    import has just talked to the server: an old "broken" verdict does not carry over."""

    async def body(serving: Runtime, cli: Runtime, connection: dict[str, Any]) -> None:
        await imports.import_mcp(serving, connection, slug="kit")
        kit = await _toolkit_id(serving, "kit")
        serving.health.observe(kit, Outcome.FATAL, "broken")
        await imports.import_mcp(serving, connection, slug="kit", replace=True)
        assert await _toolkit_id(serving, "kit") == kit
        assert (await pipeline.call_tool(serving, OPERATOR, "kit__hello", {})).is_error is False

    _two_processes(tmp_path, body)
