"""Services started in one order and stopped in the reverse one.

A ``Service`` is a name and two steps. ``Services`` starts its list in order; a start that
fails stops the ones already started (in reverse) and then raises, so a failed start-up
leaves no thread, task, child process or open database behind. Stopping goes in reverse
and does not give up at a service whose stop fails: that one is logged and the rest still
stop (a database left open because a background task would not end is worse).

The orders themselves are stated where they are owned: the runtime's parts in
``gateway/runtime.py`` (``Runtime.parts``), the whole serving process in
``gateway/lifecycle.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

Step = Callable[[], Awaitable[None]]
# Told ("start" or "stop", service name) as each step begins: debug lines, and the tests.
Observer = Callable[[str, str], None]


async def nothing() -> None:
    """The step of a service with nothing to do at that end."""


def at_once(fn: Callable[[], object]) -> Step:
    """A synchronous step (a task created, a thread started) as a step of a service."""

    async def step() -> None:
        fn()

    return step


@dataclass(frozen=True)
class Service:
    name: str
    start: Step = nothing
    stop: Step = nothing


class Services:
    def __init__(self, services: Iterable[Service], *, observe: Observer | None = None) -> None:
        self.services = tuple(services)
        self._observe = observe
        self._started: list[Service] = []

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.services)

    @property
    def started(self) -> tuple[str, ...]:
        return tuple(s.name for s in self._started)

    def _told(self, event: str, service: Service) -> None:
        log.debug("%s: %s", event, service.name)
        if self._observe is not None:
            self._observe(event, service.name)

    async def start(self) -> None:
        """Start every service in order; on a failure stop the started ones and raise."""
        if self._started:
            raise RuntimeError(f"already started: {', '.join(self.started)}")
        for service in self.services:
            self._told("start", service)
            try:
                await service.start()
            except BaseException:
                await self.stop()
                raise
            self._started.append(service)

    async def stop(self) -> None:
        """Stop the started services, last started first. Safe to call again: it stops each once."""
        while self._started:
            service = self._started.pop()
            self._told("stop", service)
            try:
                await service.stop()
            except Exception:  # logged: the services below it must still stop
                log.exception("stopping %s failed", service.name)
