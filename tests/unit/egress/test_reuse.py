"""Upstream connections are kept alive per (hostname, checked address) and never beyond it.

Every request still resolves and checks its host (A2, A4); reuse only skips the TCP (and
TLS) set-up when the checked address is the one the connection went to. Real I/O against
HTTP/1.1 servers on loopback; the resolvers are scripted to play DNS changing its answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from appliance.egress.guard import EgressPolicy
from appliance.egress.transport import Egress
from appliance.errors import UpstreamError
from tests.support.recording_upstream import serving

T = TypeVar("T")
OPEN = ("127.0.0.1/32", "127.0.0.2/32")


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        async with asyncio.timeout(20):  # bound every test, whatever goes wrong
            return await coro

    return asyncio.run(main())


def scripted(*answers: str) -> tuple[Callable[[str, int], Awaitable[list[str]]], list[str]]:
    """A resolver that gives ``answers`` in turn (the last one from then on), and its log."""
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return [answers[min(len(asked), len(answers)) - 1]]

    return resolver, asked


def test_calls_to_an_unchanged_address_reuse_one_connection() -> None:
    resolver, asked = scripted("127.0.0.1")

    async def go(port: int) -> list[int]:
        async with Egress(EgressPolicy(OPEN, resolver=resolver)) as egress:
            return [(await egress.send("GET", f"http://up.test:{port}/echo")).status for _ in range(5)]

    with serving(keep_alive=True) as server:
        assert run(go(server.port)) == [200] * 5
        assert server.connections == 1
        assert len(server.requests) == 5
    assert asked == ["up.test"] * 5  # resolved and checked on every call all the same


def test_a_changed_answer_sends_the_next_call_to_the_new_address_on_a_new_connection() -> None:
    resolver, _ = scripted("127.0.0.1", "127.0.0.1", "127.0.0.2")

    async def go(port: int) -> list[int]:
        async with Egress(EgressPolicy(OPEN, resolver=resolver)) as egress:
            return [(await egress.send("GET", f"http://up.test:{port}/echo")).status for _ in range(4)]

    with serving(keep_alive=True) as old, serving(host="127.0.0.2", port=old.port, keep_alive=True) as new:
        assert run(go(old.port)) == [200] * 4
        assert (len(old.requests), old.connections) == (2, 1)
        assert (len(new.requests), new.connections) == (2, 1)


def test_a_disallowed_new_answer_is_refused_though_a_connection_to_the_old_one_is_open() -> None:
    """SSRF-04 / I-1: a pooled connection never carries a call whose new DNS answer is refused."""
    resolver, _ = scripted("127.0.0.1", "10.0.0.7")

    async def go(port: int) -> UpstreamError:
        async with Egress(EgressPolicy(OPEN, resolver=resolver)) as egress:
            assert (await egress.send("GET", f"http://up.test:{port}/echo")).status == 200
            with pytest.raises(UpstreamError) as caught:
                await egress.send("GET", f"http://up.test:{port}/echo")
            return caught.value

    with serving(keep_alive=True) as server:
        assert run(go(server.port)).reason == "ssrf_blocked"
        assert len(server.requests) == 1


def test_two_names_on_one_address_never_share_a_connection() -> None:
    async def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    async def go(port: int) -> None:
        async with Egress(EgressPolicy(OPEN, resolver=resolver)) as egress:
            for name in ("a.test", "b.test", "a.test", "b.test"):
                assert (await egress.send("GET", f"http://{name}:{port}/echo")).status == 200

    with serving(keep_alive=True) as server:
        run(go(server.port))
        # One per name: a connection (and, over TLS, its certificate check) serves one name.
        assert server.connections == 2
        hosts = [r["headers"]["host"] for r in server.requests]
        assert hosts == [f"{n}:{server.port}" for n in ("a.test", "b.test", "a.test", "b.test")]


def test_an_answer_cut_at_the_cap_leaves_no_half_read_connection_behind() -> None:
    """UP-04: the connection of an answer cut at the cap is closed, not reused."""

    async def go(base: str) -> tuple[str, Any]:
        async with Egress(EgressPolicy(OPEN), max_bytes=1000) as egress:
            with pytest.raises(UpstreamError) as caught:
                await egress.send("GET", base + "/big")
            after = await egress.send("GET", base + "/echo")
            return caught.value.reason, after.status

    with serving(keep_alive=True) as server:
        assert run(go(server.base)) == ("upstream_too_large", 200)
        assert server.connections == 2  # the cut connection was closed, not reused


def test_concurrent_calls_each_get_a_connection_and_all_are_kept_for_reuse() -> None:
    async def go(base: str) -> list[int]:
        async with Egress(EgressPolicy(OPEN)) as egress:
            first = await asyncio.gather(*(egress.send("GET", base + "/echo") for _ in range(4)))
            again = await asyncio.gather(*(egress.send("GET", base + "/echo") for _ in range(4)))
            return [r.status for r in (*first, *again)]

    with serving(keep_alive=True) as server:
        assert run(go(server.base)) == [200] * 8
        assert server.connections <= 4


def test_a_cookie_set_by_one_answer_is_never_sent_with_a_later_request() -> None:
    """No cookie jar between calls: a Set-Cookie from one upstream answer (one toolkit's, one
    user's call) must not ride along on the next request to that host (another user's)."""
    resolver, _ = scripted("127.0.0.1")

    async def go(port: int) -> dict[str, Any]:
        async with Egress(EgressPolicy(OPEN, resolver=resolver)) as egress:
            first = await egress.send("GET", f"http://up.test:{port}/set-cookie")
            assert "alice-secret" in first.headers.get("set-cookie", "")
            echoed = await egress.send("GET", f"http://up.test:{port}/echo", cookies={"mine": "1"})
            return dict(json.loads(echoed.body)["headers"])

    with serving(keep_alive=True) as server:
        headers = run(go(server.port))
    assert headers.get("cookie") == "mine=1"  # only what this call set itself
