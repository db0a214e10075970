"""The stateless 2026-07-28 revision on /mcp, beside the legacy handshake, on a real
``toolspoke serve``: the official SDK for the behaviour that matters to clients (a modern
client never falls back, a legacy one still works, and both see the same answers).

The wire rules (envelope, routing headers, status codes) are tested in process:
tests/rpc/test_modern.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e
MODERN = "2026-07-28"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    with running_appliance(tmp_path_factory.mktemp("modern") / "data") as running:
        yield running


def test_ten_concurrent_stateless_clients_get_the_same_answers_as_legacy_clients(app: Appliance) -> None:
    async def session(mode: str, n: int) -> tuple[str, list[str], list[str]]:
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {app.key}"}) as http,
            Client(
                streamable_http_client(app.mcp_url, http_client=http), mode=mode, read_timeout_seconds=30
            ) as client,
        ):
            listed = sorted(t.name for t in (await client.list_tools()).tools)
            found = await client.call_tool("search_tools", {"query": f"note number {n % 3}"})
            names = [r["name"] for r in found.structured_content["results"]]
            return client.session.protocol_version, listed, names

    async def everyone() -> list[tuple[str, list[str], list[str]]]:
        return await asyncio.gather(*(session(m, n) for m in ("auto", "legacy") for n in range(10)))

    results = asyncio.run(asyncio.wait_for(everyone(), timeout=120))
    modern_runs, legacy_runs = results[:10], results[10:]
    assert {r[0] for r in modern_runs} == {MODERN}
    assert {r[0] for r in legacy_runs} == {"2025-11-25"}
    for a, b in zip(modern_runs, legacy_runs, strict=True):
        assert a[1:] == b[1:]
