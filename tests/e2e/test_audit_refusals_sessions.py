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

import httpx
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.shared.exceptions import MCPError

from tests.e2e.test_audit_refusals import BRIDGE_ONLY, CASES, ENV, RATE
from tests.support.accounts import MeteredUpstream, add_user_keys, admin, credits_path, install, query
from tests.support.clients import connect, modern_tools_call
from tests.support.servers import Appliance, running_appliance

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
    upstream = MeteredUpstream()
    data = tmp_path_factory.mktemp("session-refusals") / "data"
    try:
        with running_appliance(data, env=ENV) as app:
            install(app, "meter", upstream, fee=1)
            install(app, "capped", upstream, fee=1, daily_limit=1)
            r = admin(app, "POST", "/toolkits/openapi", {"slug": "hidden", "spec": upstream.spec()})
            assert r.status_code == 201, r.text  # the admin's own, private: no grant for others
            pairs = [
                (face, case)
                for face, (_, _, naming) in FACES.items()
                for case in [*CASES, *BRIDGE_ONLY]
                if case in CASES or naming == "bridge"
            ]
            made = add_user_keys(data, "caller", len(pairs) + 1, agents=True)
            assert admin(app, "POST", credits_path(app, "caller"), {"amount": 1000}).status_code == 201
            # Spend the capped toolkit's one call of the day.
            headers, body = modern_tools_call(made[-1], "capped__hit")
            assert "result" in httpx.post(app.mcp_url, json=body, headers=headers, timeout=30).json()
            yield app, dict(zip(pairs, made, strict=False))
    finally:
        upstream.close()


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
    missing = []
    for case, (tool, arguments, outcome, toolkit) in {**CASES, **BRIDGE_ONLY}.items():
        key = keys.get((face, case))
        if key is None:
            continue
        if case == "no_grant" and FACES[face][2] == "slug":
            continue  # the handshake with a toolkit it cannot see is refused: no call is made
        asyncio.run(asyncio.wait_for(attempt(app, face, case, key, tool, arguments), timeout=25))
        rows = query(
            app.data_dir,
            "SELECT outcome, toolkit FROM audit_log WHERE key_prefix = ? ORDER BY id",
            (key[:12],),
        )
        refused = [tuple(r) for r in rows if r[0] not in ("ok", "is_error")]
        if refused != [(outcome, toolkit)]:
            missing.append((case, rows))
    assert not missing, f"{face}: refusals without their one audit row: {missing}"
