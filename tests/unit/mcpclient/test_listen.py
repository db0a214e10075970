"""The listen loop's rules, in process: rotation, back-off and its bound, catch-up, refusal.

The end-to-end behaviour (a real SDK upstream, a real appliance) is in
``tests/e2e/test_mcp_listen.py``; here a scripted session plays the upstream's answers so
the bounds can be checked exactly and fast (back-off scaled to milliseconds).
"""

from __future__ import annotations

import asyncio
from typing import Any

from appliance.errors import UpstreamError
from appliance.mcpclient.listen import MAX_FAILURES, Listener


class ScriptedSession:
    """``request`` answers from a script; the session closes when the script runs out."""

    def __init__(self, script: list[UpstreamError | None]) -> None:
        self.script = list(script)
        self.requests: list[tuple[str, dict[str, Any], float]] = []
        self.is_closed = False

    async def request(self, method: str, params: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        self.requests.append((method, params, timeout_s))
        if not self.script:
            self.is_closed = True
            raise UpstreamError("closed", reason="upstream_unavailable")
        outcome = self.script.pop(0)
        if outcome is not None:
            raise outcome
        return {}


def broke() -> UpstreamError:
    return UpstreamError("the stream broke", reason="upstream_unavailable")


def listen(script: list[UpstreamError | None]) -> tuple[ScriptedSession, Listener, list[int]]:
    session = ScriptedSession(script)
    gaps: list[int] = []
    listener = Listener(session, "kit", on_gap=lambda: gaps.append(len(session.requests)), backoff_s=0.001)  # type: ignore[arg-type]
    asyncio.run(asyncio.wait_for(listener.run(), timeout=10))
    return session, listener, gaps


def test_it_asks_for_tool_list_changes_only_and_rotates_without_a_catch_up() -> None:
    rotation = UpstreamError("no answer", reason="upstream_timeout")
    session, listener, gaps = listen([rotation, rotation])
    assert [r[0] for r in session.requests] == ["subscriptions/listen"] * 3
    assert session.requests[0][1] == {"notifications": {"toolsListChanged": True}}
    assert gaps == []  # a rotation misses nothing: the old stream was open until the new one
    assert listener.opened == 3


def test_a_broken_stream_is_reopened_with_a_catch_up_re_sync_each_time() -> None:
    session, _, gaps = listen([broke(), None])  # a break, then the upstream ends it gracefully
    assert gaps == [1, 2]  # before the 2nd and the 3rd listen request
    assert len(session.requests) == 3


def test_quick_breaks_are_given_up_after_the_bound_and_nothing_more_is_sent() -> None:
    session, listener, _ = listen([broke()] * (MAX_FAILURES + 5))
    assert listener.failures == MAX_FAILURES
    assert len(session.requests) == MAX_FAILURES
    assert not session.is_closed  # it gave up; the session itself stays usable


def test_a_server_that_does_not_serve_listen_is_not_asked_again() -> None:
    refused = UpstreamError("no such method", reason="upstream_error", data={"code": -32601})
    session, _, gaps = listen([refused, None, None])
    assert len(session.requests) == 1 and gaps == []
