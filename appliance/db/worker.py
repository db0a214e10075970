"""One thread that runs whole functions on one SQLite connection: a function, one hop.

Why our own thread: aiosqlite's public API runs one statement per call (each a hop to its
thread and back) and has no public way to run a function of several statements there; its
``_execute`` is private, and any release may change it. A store function that reads three
rows, or a transaction that writes a call's audit row and charge, must cost one hop, so the
seam that does it is ours. Measured on this machine (an in-memory one-row SELECT, 5,000
hops): 35 µs of CPU a hop here, 42 µs for aiosqlite's one-hop ``execute_fetchall``, 60 µs for
``asyncio.to_thread``, 123 µs for aiosqlite's ``async with execute(...)`` + ``fetchall``
(three hops). Through ``Database`` (a one-row read in ``batch``, a one-row ``write_batch``)
a hop here costs what aiosqlite's private ``_execute`` did, within this machine's noise.
The hand-off is the cheapest one known: a ``SimpleQueue`` to the thread and
``call_soon_threadsafe`` back, no ``concurrent.futures`` in between.

A job handed to the thread is always finished before its caller goes on, even when the
caller is cancelled: the connection's owner (a lent reader, the writer's lock) may hand it
to someone else the moment the caller leaves, and two threads must not be half-way through
work on one connection (a transaction would carry another caller's statements).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_Job = tuple[asyncio.Future[Any], Callable[..., Any], tuple[Any, ...]] | None


def _nothing() -> None:
    return None


def _settle(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if fut.done():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


class Worker:
    """A daemon thread serving one connection's functions in order (FIFO)."""

    def __init__(self, name: str):
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()
        self._open = True
        # How many functions this worker has run: the hop count the seam's tests assert on.
        self.hops = 0

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fut, fn, args = job
            try:
                value, ok = fn(*args), True
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller, never lost
                value, ok = exc, False
            # A closed loop (RuntimeError): nobody is waiting for the answer any more.
            with contextlib.suppress(RuntimeError):
                fut.get_loop().call_soon_threadsafe(_settle, fut, ok, value)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the thread; its result or its exception here."""
        if not self._open:
            raise RuntimeError("the connection is closed")
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self.hops += 1
        self._jobs.put_nowait((fut, fn, args))
        try:
            return await fut
        except asyncio.CancelledError:
            await self._drained()
            raise

    async def _drained(self) -> None:
        """Return once every job queued so far has run: a no-op queued behind them (FIFO),
        waited for through any further cancellation."""
        if not self._open:
            return  # stopping: the thread finishes its queue on its own
        barrier: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._jobs.put_nowait((barrier, _nothing, ()))
        while not barrier.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(barrier)

    def stop(self, timeout: float = 5.0) -> None:
        """Let the thread finish its queue and end (waits up to ``timeout`` seconds)."""
        if not self._open:
            return
        self._open = False
        self._jobs.put_nowait(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
