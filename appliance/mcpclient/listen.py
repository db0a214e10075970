"""The 2026-07-28 ``subscriptions/listen`` stream of a pooled upstream session.

In the stateless revision a server can only push ``notifications/tools/list_changed`` on a
stream the client opened with ``subscriptions/listen`` (streamable-http.mdx, "Receiving
Messages": "Long-lived notification streams are obtained by sending a
``subscriptions/listen`` request"); 2025-era sessions get it on their own channel. So for
each pooled modern session whose server declares ``capabilities.tools.listChanged`` the
pool keeps one listen request open. Its notifications reach ``McpSession``'s
``on_tools_changed`` like any other list_changed, so the re-sync is the same.

The stream lives as long as its session: closing the session (toolkit removed, credential
changed, stdio child idle-stopped or crashed) ends it. It is re-opened:

- after ``ROTATE_S`` (a planned rotation, so a silently dead TCP connection or the byte cap
  of one answer cannot end listening for good);
- after a break, with back-off (``BACKOFF_S`` doubling up to ``MAX_BACKOFF_S``), giving up
  after ``MAX_FAILURES`` breaks in a row (the periodic re-sync stays the backstop; the next
  session of the toolkit listens again). A stream that lasted ``HEALTHY_S`` resets the count.

Events are not replayed (a dropped stream is not resumable), so after re-listening
following a break the toolkit is re-synced once (``on_gap``); so is it when a later session
of the same toolkit starts listening (``after_gap``: the session was replaced after an
outage, or a stdio child started again after idling), since nobody listened in between.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from appliance.errors import UpstreamError
from appliance.mcpclient.session import METHOD_NOT_FOUND, McpSession

log = logging.getLogger(__name__)

LISTEN_METHOD = "subscriptions/listen"
ROTATE_S = 300.0
BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
MAX_FAILURES = 8
HEALTHY_S = 30.0
FILTER = {"notifications": {"toolsListChanged": True}}


def wants_listen(session: McpSession) -> bool:
    """A modern session whose server declares ``tools.listChanged``: it needs a listen stream."""
    tools = session.capabilities.get("tools")
    return session.modern and isinstance(tools, dict) and tools.get("listChanged") is True


class Listener:
    """Keeps one ``subscriptions/listen`` request open on ``session`` (run it as a task)."""

    def __init__(
        self,
        session: McpSession,
        name: str,
        *,
        on_gap: Callable[[], None] | None = None,
        after_gap: bool = False,
        rotate_s: float = ROTATE_S,
        backoff_s: float = BACKOFF_S,
    ) -> None:
        self.session = session
        self.name = name
        self.on_gap = on_gap
        self.after_gap = after_gap  # an earlier session of this toolkit listened: catch up
        self.rotate_s = rotate_s
        self.backoff_s = backoff_s
        self.opened = 0  # listen requests sent (for tests and logs)
        self.failures = 0  # breaks in a row

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        broken = self.after_gap
        while not self.session.is_closed:
            if broken and self.on_gap is not None:
                self.on_gap()  # the break may have swallowed a notification: refetch
            started = loop.time()
            self.opened += 1
            try:
                await self.session.request(LISTEN_METHOD, dict(FILTER), timeout_s=self.rotate_s)
                why = "the upstream ended it"  # gracefully; still a gap in listening
            except UpstreamError as exc:
                if self.session.is_closed:
                    return
                if exc.reason == "upstream_timeout":
                    broken = False  # our own rotation: nothing was missed while it was open
                    continue
                if exc.reason == "upstream_error" and exc.data.get("code") == METHOD_NOT_FOUND:
                    log.info("%s declares tools.listChanged but does not serve %s", self.name, LISTEN_METHOD)
                    return
                why = exc.reason
            broken = True
            # A stream that lasted is healthy: re-listen at once; quick breaks back off.
            self.failures = 0 if loop.time() - started >= HEALTHY_S else self.failures + 1
            if self.failures >= MAX_FAILURES:
                log.warning(
                    "%s: the listen stream broke %d times in a row; relying on the periodic re-sync",
                    self.name,
                    self.failures,
                )
                return
            if self.failures:
                wait = min(MAX_BACKOFF_S, self.backoff_s * 2 ** (self.failures - 1))
                log.info("%s: the listen stream broke (%s); listening again in %g s", self.name, why, wait)
                await asyncio.sleep(wait)


def listen_task(
    session: McpSession, name: str, on_gap: Callable[[], None] | None, *, after_gap: bool = False
) -> asyncio.Task[Any]:
    """Start a ``Listener`` for ``session`` in a task of its own."""
    listener = Listener(session, name, on_gap=on_gap, after_gap=after_gap)
    return asyncio.get_running_loop().create_task(listener.run(), name=f"mcp-listen-{name}")
