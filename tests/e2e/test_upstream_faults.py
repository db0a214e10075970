"""Upstream faults (RELIABILITY G) on MCP toolkits, end to end over HTTP, SSE and stdio.

A real ``toolspoke serve`` in front of the reference upstream (``tests/support/upstream_server.py``) over
streamable HTTP, legacy HTTP+SSE and stdio, with a short call deadline set through
``TOOLSPOKE_UPSTREAM_TIMEOUT_S`` so the timeout case costs seconds, not 30.

- UP-01: a silent tool is ``upstream_timeout`` at the deadline; the next call works.
- UP-04: the owner's per-toolkit cap (``PUT .../limits``) is what a result is measured
  against, in both directions: raised above the setting it lets a larger result through,
  lowered below it a smaller one is refused, and other toolkits keep theirs.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from tests.support.clients import connect
from tests.support.peers import UPSTREAM, free_port, peer
from tests.support.servers import Appliance, import_mcp, running_appliance

pytestmark = pytest.mark.e2e
SETTING = 262144
DEADLINE_S = 3
SLUGS = ("caphttp", "capsse", "capstdio")


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    logs = tmp_path_factory.mktemp("cap-peers")
    with ExitStack() as stack:
        urls = {}
        for transport in ("streamable-http", "sse"):
            port = free_port()
            argv = [sys.executable, str(UPSTREAM), "--transport", transport, "--port", str(port)]
            stack.enter_context(peer(argv, port, logs / f"{transport}.log"))
            urls[transport] = f"http://127.0.0.1:{port}/{'sse' if transport == 'sse' else 'mcp'}"
        running = stack.enter_context(
            running_appliance(
                tmp_path_factory.mktemp("faults") / "data",
                # whole answers: the response cap is under test, not results kept aside
                env={
                    "TOOLSPOKE_UPSTREAM_TIMEOUT_S": str(DEADLINE_S),
                    "TOOLSPOKE_ARTIFACT_THRESHOLD_BYTES": "0",
                },
            )
        )
        import_mcp(running, urls["streamable-http"], "--slug", "caphttp")
        import_mcp(running, urls["sse"], "--slug", "capsse", "--transport", "sse")
        stdio = ["--env", "UPSTREAM_TRANSPORT=stdio", "--", sys.executable, str(UPSTREAM)]
        import_mcp(running, "--slug", "capstdio", *stdio)
        yield running


def set_cap(app: Appliance, slug: str, value: int | None) -> None:
    with httpx.Client(base_url=app.base_url, headers={"Authorization": f"Bearer {app.key}"}) as api:
        r = api.put(f"/api/v1/toolkits/{slug}/limits", json={"max_response_bytes": value})
        assert r.status_code == 200, r.text


async def big(app: Appliance, slug: str, size: int) -> Any:
    async with connect(app) as client:
        return await client.call_tool(f"{slug}__big_result", {"size_bytes": size})


def text(result: Any) -> str:
    return "".join(getattr(p, "text", "") for p in result.content)


@pytest.mark.parametrize("slug", SLUGS)
def test_an_mcp_toolkit_honours_its_own_response_cap_raised_or_lowered(app: Appliance, slug: str) -> None:
    """UP-04: an MCP result over the toolkit's cap is upstream_too_large naming the cap; the
    owner's per-toolkit cap lets a larger result through or refuses a smaller one."""
    try:
        # Raised above the setting (and above the stdio line limit's default for stdio).
        set_cap(app, slug, 1 << 20)
        fits = run(big(app, slug, 400_000))
        assert fits.is_error is False, text(fits)[:300]
        assert len(text(fits)) == 400_000

        # Lowered below the setting: a result the setting would pass is refused, naming the cap.
        set_cap(app, slug, 1000)
        refused = run(big(app, slug, 5000))
        assert refused.is_error is True
        assert refused.meta["toolspoke/reason"] == "upstream_too_large"
        assert refused.meta["toolspoke/max_bytes"] == 1000 and "1000" in text(refused)
        assert "Traceback" not in text(refused)
        small = run(big(app, slug, 100))  # the session is unharmed: a small result still fits
        assert small.is_error is False and text(small) == "x" * 100
    finally:
        set_cap(app, slug, None)
    # Back to the setting: 400 kB is over 256 KiB again.
    over = run(big(app, slug, 400_000))
    assert over.is_error is True and over.meta["toolspoke/reason"] == "upstream_too_large"
    assert over.meta["toolspoke/max_bytes"] == SETTING


def test_a_raised_cap_on_one_mcp_toolkit_leaves_the_others_at_the_setting(app: Appliance) -> None:
    """UP-04: the cap is per toolkit; raising one does not raise another's."""
    try:
        set_cap(app, "caphttp", 1 << 20)
        assert run(big(app, "caphttp", 400_000)).is_error is False
        for other in ("capsse", "capstdio"):
            result = run(big(app, other, 400_000))
            assert result.is_error is True and result.meta["toolspoke/max_bytes"] == SETTING
    finally:
        set_cap(app, "caphttp", None)


@pytest.mark.parametrize("slug", SLUGS)
def test_a_silent_mcp_tool_times_out_at_the_call_deadline_and_the_next_call_works(
    app: Appliance, slug: str
) -> None:
    """UP-01 / UP-03 / I-7: a tool that does not answer is upstream_timeout at the configured
    deadline, though it keeps sending progress (a hard cap, not an idle timer), with no
    internals in the text; other calls are unaffected."""
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async def scenario() -> tuple[Any, float, Any]:
        async with connect(app) as client:
            started = time.monotonic()
            silent = await client.call_tool(f"{slug}__slow", {"seconds": 60}, progress_callback=on_progress)
            elapsed = time.monotonic() - started
            after = await client.call_tool(f"{slug}__add", {"a": 2, "b": 3})
            return silent, elapsed, after

    silent, elapsed, after = run(scenario())
    assert silent.is_error is True
    assert silent.meta["toolspoke/reason"] == "upstream_timeout"
    assert DEADLINE_S - 0.5 <= elapsed < DEADLINE_S + 10, elapsed
    assert "Traceback" not in text(silent) and "/appliance/" not in text(silent)
    assert progress, "the upstream's progress was not relayed while the call ran"
    assert after.is_error is False and after.structured_content == {"result": 5}
