"""The event loops the stdio supervisor must behave alike on: the stock asyncio loop (tests,
and any platform without uvloop) and uvloop (what ``serve`` and ``stdio`` run on)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
import uvloop

T = TypeVar("T")

LoopFactory = Callable[[], asyncio.AbstractEventLoop]

# libuv opens a process-wide pipe (its signal lock) with the first loop and keeps it: open
# it now, so the tests' descriptor counts see only what a case itself leaves open.
uvloop.new_event_loop().close()

LOOPS = [
    pytest.param(asyncio.new_event_loop, id="asyncio"),
    pytest.param(uvloop.new_event_loop, id="uvloop"),
]


def run_on(factory: LoopFactory, coro: Coroutine[Any, Any, T], seconds: float = 30.0) -> T:
    """Run ``coro`` to its end on a fresh loop from ``factory``, bounded by ``seconds``."""

    async def bounded() -> T:
        async with asyncio.timeout(seconds):
            return await coro

    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(bounded())
