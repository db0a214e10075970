"""Every refused tool call leaves its audit row on the session faces too (issue 16 item 11).

``test_audit_refusals.py`` drives the stateless 2026-07-28 era (bridge runners, a direct
``tools/call``, ``/mcp/<slug>``), ``toolspoke stdio`` and ``toolspoke call``. The faces that
keep a session were left out: ``/mcp`` in the 2025-11-25 era (the SDK's handshake) and the
legacy SSE transport (``/sse``, ``/sse/<slug>``, posts to ``/messages``). Same refusals, same
rule: each attempt leaves exactly one row with the refusal's outcome, naming the toolkit
whenever the caller may see the tool (a throttled attempt too). A session with a toolkit's
endpoint the caller cannot see is refused at its handshake, so no call is made there.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.shared.exceptions import MCPError

from tests.e2e.test_audit_refusals import BRIDGE_ONLY, CASES, RATE, refusal_world, refusals_without_their_row
from tests.support.clients import connect
from tests.support.servers import Appliance

pytestmark = pytest.mark.e2e

# face -> (transport, endpoint, how the tool is named): "bridge" through the runners,
# "direct" by its gateway name, "slug" by its own name on the toolkit's endpoint.
FACES: dict[str, tuple[str, str, str]] = {
    "2025-11-25 bridge": ("http", "/mcp", "bridge"),
    "2025-11-25 direct": ("http", "/mcp", "direct"),
    "2025-11-25 slug": ("http", "/mcp/{kit}", "slug"),
    "sse bridge": ("sse", "/sse", "bridge"),
    "sse slug": ("sse", "/sse/{kit}", "slug"),
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Appliance, dict[tuple[str, str], str]]]:
    pairs = [
        (face, case)
        for face, (_, _, naming) in FACES.items()
        for case in [*CASES, *BRIDGE_ONLY]
        if case in CASES or naming == "bridge"
    ]
    with refusal_world(tmp_path_factory.mktemp("session-refusals") / "data", pairs) as world:
        yield world


@asynccontextmanager
async def session(app: Appliance, transport: str, path: str) -> AsyncIterator[Client]:
    if transport == "http":
        async with connect(app, path, mode="legacy", read_timeout_s=30) as client:
            yield client
        return
    sse = sse_client(app.base_url + path, headers={"Authorization": f"Bearer {app.key}"})
    async with Client(sse, read_timeout_seconds=30) as client:
        yield client


async def attempt(
    app: Appliance, face: str, case: str, key: str, tool: str, arguments: dict[str, Any]
) -> None:
    transport, endpoint, naming = FACES[face]
    kit, _, own = tool.partition("__")
    if naming == "slug":
        path, name, args = endpoint.format(kit=kit if case != "unknown" else "meter"), own, arguments
    elif naming == "bridge":
        runner = "run_destructive_tool" if case == "wrong_runner" else "use_tool"
        path, name, args = endpoint, runner, {"tool": tool, "input": arguments}
    else:
        path, name, args = endpoint, tool, arguments
    async with session(dataclasses.replace(app, key=key), transport, path) as client:
        for _ in range(RATE + 1 if case == "rate_limit" else 1):
            # A refusal answered as a JSON-RPC error raises; the row is what counts here.
            with contextlib.suppress(MCPError):
                await client.call_tool(name, args)


@pytest.mark.parametrize("face", FACES)
def test_each_refusal_on_a_session_face_leaves_one_audit_row_naming_what_the_caller_may_see(
    world: tuple[Appliance, dict[tuple[str, str], str]], face: str
) -> None:
    app, keys = world

    def run(case: str, key: str, tool: str, arguments: dict[str, Any]) -> None:
        asyncio.run(asyncio.wait_for(attempt(app, face, case, key, tool, arguments), timeout=25))

    missing = refusals_without_their_row(
        app,
        keys,
        face,
        run,
        # The handshake with a toolkit it cannot see is refused: no call is made.
        skip=lambda case: case == "no_grant" and FACES[face][2] == "slug",
    )
    assert not missing, f"{face}: refusals without their one audit row: {missing}"
