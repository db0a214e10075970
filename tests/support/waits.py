"""Bounded waits on a real condition, for tests that must see something happen.

A test waits for the condition it needs (a message sent, a callback run), never for a
length of time that usually suffices: on a loaded machine that time does not, and on an
idle one it is wasted. The pace of the poll is not a synchronisation; the deadline only
turns a hang into a failure that says what never happened.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_for(what: str, check: Callable[[], bool], timeout: float = 20, pace_s: float = 0.02) -> None:
    """Until ``check()`` is true, polled every ``pace_s``; fails naming ``what`` at ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(pace_s)


async def until(what: str, check: Callable[[], bool], timeout: float = 5) -> None:
    """Until ``check()`` is true, looked at after every turn of the event loop (other tasks
    run between two looks); fails naming ``what`` at ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.001)
