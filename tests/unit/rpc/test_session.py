"""The MCP session every face shares (``rpc/session.py``), in-process.

The store, with an injected clock: idle expiry, the LRU cap, key binding, delete. The session
object, on a real runtime and the real method table: the era decision, the handshake, the
log level, the calls in flight and their cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from appliance import config
from appliance.access import keys
from appliance.errors import Unauthorized
from appliance.gateway import auth
from appliance.gateway.runtime import Runtime
from appliance.models import Principal
from appliance.rpc import jsonrpc
from appliance.rpc.session import Session, SessionStore, is_modern, modern_context

KEY = "tsk_aaaaaaaa"
ANYONE = Principal(user_id=1, name="u", is_admin=False, key_prefix=KEY)
OTHER_KEY = "tsk_bbbbbbbb"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_a_new_session_keeps_its_version_and_client_info(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    opened = store.create(KEY, "2025-06-18", {"name": "c", "version": "1"})
    found = store.get(opened.id, KEY)
    assert found is opened
    assert (found.protocol_version, found.client_info) == ("2025-06-18", {"name": "c", "version": "1"})
    assert len(opened.id) >= 32 and all(0x21 <= ord(c) <= 0x7E for c in opened.id)
    assert store.create(KEY, "2025-06-18", {}).id != opened.id


def test_a_session_expires_after_the_ttl_of_idleness(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    opened = store.create(KEY, "2025-11-25", {})
    clock.now += 60
    assert store.get(opened.id, KEY) is opened  # exactly at the TTL it is still alive
    clock.now += 60.001
    assert store.get(opened.id, KEY) is None
    assert len(store) == 0
    clock.now -= 1000  # the clock going back does not resurrect it
    assert store.get(opened.id, KEY) is None


def test_use_keeps_a_session_alive_past_the_ttl(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    opened = store.create(KEY, "2025-11-25", {})
    for _ in range(5):
        clock.now += 45
        assert store.get(opened.id, KEY) is opened
    assert clock.now - 1000 > 60


def test_creating_a_session_sweeps_the_expired_ones(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    old = [store.create(KEY, "2025-11-25", {}) for _ in range(3)]
    clock.now += 61
    fresh = store.create(KEY, "2025-11-25", {})
    assert len(store) == 1
    assert all(store.get(s.id, KEY) is None for s in old)
    assert store.get(fresh.id, KEY) is fresh


def test_the_least_recently_used_session_is_dropped_beyond_the_cap(clock: Clock) -> None:
    store = SessionStore(ttl_s=600, max_sessions=3, clock=clock)
    a, b, c = (store.create(KEY, "2025-11-25", {}) for _ in range(3))
    clock.now += 1
    assert store.get(a.id, KEY) is a  # a is now the most recently used; b the least
    d = store.create(KEY, "2025-11-25", {})
    assert len(store) == 3
    assert store.get(b.id, KEY) is None
    assert {s.id for s in (a, c, d) if store.get(s.id, KEY) is s} == {a.id, c.id, d.id}


def test_a_session_is_invisible_to_another_key_prefix(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    opened = store.create(KEY, "2025-11-25", {})
    assert store.get(opened.id, OTHER_KEY) is None
    assert store.delete(opened.id, OTHER_KEY) is False
    # The foreign attempts neither ended nor touched it.
    assert store.get(opened.id, KEY) is opened
    assert store.get("no-such-session", KEY) is None


def test_a_foreign_lookup_does_not_refresh_a_session(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    opened = store.create(KEY, "2025-11-25", {})
    clock.now += 50
    assert store.get(opened.id, OTHER_KEY) is None
    clock.now += 20
    assert store.get(opened.id, KEY) is None


def test_delete_ends_a_session_once(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    opened = store.create(KEY, "2025-11-25", {})
    kept = store.create(KEY, "2025-11-25", {})
    assert store.delete(opened.id, KEY) is True
    assert store.get(opened.id, KEY) is None
    assert store.delete(opened.id, KEY) is False
    assert store.get(kept.id, KEY) is kept
    assert len(store) == 1


def test_an_expired_session_cannot_be_deleted(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    opened = store.create(KEY, "2025-11-25", {})
    clock.now += 61
    assert store.delete(opened.id, KEY) is False
    assert len(store) == 0


def test_one_key_beyond_its_own_cap_drops_its_own_oldest_session_never_another_keys(clock: Clock) -> None:
    """RATE-05: a key flooding initialize pushes out only its own sessions."""
    store = SessionStore(ttl_s=60, max_sessions=100, clock=clock, per_key=3)
    theirs = store.create(OTHER_KEY, "2025-11-25", {})
    mine = [store.create(KEY, "2025-11-25", {}) for _ in range(3)]
    store.get(mine[0].id, KEY)  # used: now the second is this key's least recently used
    flood = [store.create(KEY, "2025-11-25", {}) for _ in range(50)]
    assert store.get(theirs.id, OTHER_KEY) is theirs
    assert [s.id for s in flood[-3:] if store.get(s.id, KEY) is s] == [s.id for s in flood[-3:]]
    assert store.get(mine[0].id, KEY) is None and store.get(mine[1].id, KEY) is None
    assert len(store) == 4
    store.delete(flood[-1].id, KEY)
    assert store.create(KEY, "2025-11-25", {}) and store.get(flood[-2].id, KEY) is not None


# -- the session object --------------------------------------------------------------------

API_KEY = "tsk_session-unit-key-0123456789abcdefghijkl"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"roots": {}},
}


def msg(method: str, msg_id: Any = None, **params: Any) -> jsonrpc.Message:
    doc: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if msg_id is not None:
        doc["id"] = msg_id
    return jsonrpc.parse(orjson.dumps(doc))


def on_runtime(tmp_path: Path, scenario: Callable[[Runtime, Principal], Awaitable[None]]) -> None:
    """Run ``scenario`` on a real runtime (a fresh data directory) with a real key's principal."""

    async def main() -> None:
        rt = Runtime(config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path / "data"), "TOOLSPOKE_DEMO": "0"}))
        await rt.open()
        try:
            async with rt.db.write() as tx:
                await keys.add_key(tx, await keys.ensure_admin(tx), API_KEY, name="test")
            await scenario(rt, await auth.authenticate(rt, API_KEY))
        finally:
            await rt.close()

    asyncio.run(asyncio.wait_for(main(), timeout=30))


def test_the_era_of_a_request_is_its_meta_version_or_its_header_and_initialize_is_legacy() -> None:
    assert is_modern(msg("tools/list", 1, _meta=MODERN_META))
    assert is_modern(msg("initialize", 1, _meta=MODERN_META))  # a modern request for a removed method
    assert not is_modern(msg("initialize", 1, protocolVersion="2025-06-18"), "2026-07-28")
    assert is_modern(msg("tools/list", 1), "2026-07-28")
    assert not is_modern(msg("tools/list", 1), "2025-06-18")
    assert not is_modern(msg("tools/list", 1))


def test_a_modern_request_is_served_on_its_own_envelope_without_touching_the_session(tmp_path: Path) -> None:
    async def scenario(rt: Runtime, who: Principal) -> None:
        session = Session(who.key_prefix)
        reply = await session.answer(rt, who, msg("tools/list", 1, _meta=MODERN_META))
        assert reply["result"]["resultType"] == "complete" and reply["result"]["cacheScope"] == "private"
        assert session.protocol_version is None and session.in_flight == {}
        ctx = modern_context(
            who, msg("tools/list", 2, _meta={**MODERN_META, "io.modelcontextprotocol/logLevel": "error"})
        )
        assert (ctx.modern, ctx.protocol_version, ctx.log_level) == (True, "2026-07-28", "error")
        assert ctx.client_capabilities == {"roots": {}}
        # Legacy SSE speaks no 2026-07-28: the same request there needs the handshake.
        sse = Session(who.key_prefix, speaks_modern=False)
        refused = await sse.answer(rt, who, msg("tools/list", 3, _meta=MODERN_META))
        assert refused["error"]["code"] == -32600 and "handshake era" in refused["error"]["message"]

    on_runtime(tmp_path, scenario)


def test_before_the_handshake_only_ping_and_discover_are_served(tmp_path: Path) -> None:
    async def scenario(rt: Runtime, who: Principal) -> None:
        both, legacy_only = Session(who.key_prefix), Session(who.key_prefix, speaks_modern=False)
        for session in (both, legacy_only):
            assert (await session.answer(rt, who, msg("ping", 1)))["result"] == {}
        refused = await both.answer(rt, who, msg("tools/list", 2))
        assert refused["error"]["message"] == "send initialize (or a 2026-07-28 request) first"
        # A discover without the envelope reaches the method table, which knows no such legacy method.
        assert (await both.answer(rt, who, msg("server/discover", 3)))["error"]["code"] == -32601
        refused = await legacy_only.answer(rt, who, msg("server/discover", 3))
        assert refused["error"]["code"] == -32600 and refused["id"] == 3

    on_runtime(tmp_path, scenario)


def test_initialize_negotiates_the_session_and_later_requests_speak_that_version(tmp_path: Path) -> None:
    async def scenario(rt: Runtime, who: Principal) -> None:
        session = Session(who.key_prefix)
        hello = msg(
            "initialize", 1, protocolVersion="2025-06-18", clientInfo={"name": "c"}, capabilities={"x": {}}
        )
        reply = await session.answer(rt, who, hello)
        assert reply["result"]["protocolVersion"] == "2025-06-18"
        assert (session.protocol_version, session.client_info, session.client_capabilities) == (
            "2025-06-18",
            {"name": "c"},
            {"x": {}},
        )
        ctx = session.context(who)
        assert (ctx.protocol_version, ctx.modern, ctx.client_capabilities) == ("2025-06-18", False, None)
        assert "tools" in (await session.answer(rt, who, msg("tools/list", 2)))["result"]
        # An unknown version gets the newest; a failed initialize leaves the session as it was.
        assert (await session.answer(rt, who, msg("initialize", 3, protocolVersion="1999-01-01")))["result"][
            "protocolVersion"
        ] == "2025-11-25"
        assert "error" in await session.answer(rt, who, msg("initialize", 4, protocolVersion=5))
        assert session.protocol_version == "2025-11-25"

    on_runtime(tmp_path, scenario)


def test_set_level_is_kept_by_the_session_and_checked(tmp_path: Path) -> None:
    async def scenario(rt: Runtime, who: Principal) -> None:
        session = Session(who.key_prefix)
        await session.answer(rt, who, msg("initialize", 1, protocolVersion="2025-11-25"))
        assert session.log_level == "debug" and session.context(who).log_level == "debug"
        assert (await session.answer(rt, who, msg("logging/setLevel", 2, level="warning")))["result"] == {}
        assert session.log_level == "warning" and session.context(who).log_level == "warning"
        bad = await session.answer(rt, who, msg("logging/setLevel", 3, level="loud"))
        assert bad["error"]["code"] == -32602 and session.log_level == "warning"

    on_runtime(tmp_path, scenario)


def test_a_request_behind_a_running_initialize_waits_for_its_answer() -> None:
    async def scenario() -> None:
        session = Session("tsk_aaaaaaaa")
        handshake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        session.handshake_running(handshake)
        waiting = asyncio.ensure_future(session.settled())
        # One turn of the loop, not a timed wait: a waiter that did not wait is done after it.
        await asyncio.sleep(0)
        assert not waiting.done()
        session.protocol_version = "2025-11-25"
        handshake.set_result(None)
        await asyncio.wait_for(waiting, 5)
        # Once negotiated, a later initialize is no handshake to wait for.
        again: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        session.handshake_running(again)
        await asyncio.wait_for(session.settled(), 5)

    asyncio.run(scenario())


def test_cancellation_stops_only_the_named_call_in_flight() -> None:
    async def scenario() -> None:
        session = Session("tsk_aaaaaaaa")
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        session.track(1, first)
        session.track("b", second)
        assert session.running(1) and session.running("b") and not session.running(2)
        for odd in (True, 1.0, None, [1], {"x": 1}, "1"):  # no valid id that names a call
            session.notice(msg("notifications/cancelled", requestId=odd))
        assert not first.cancelled() and not second.cancelled()
        session.notice(msg("notifications/cancelled", requestId=1))
        assert first.cancelled() and not second.cancelled()
        await asyncio.gather(first, return_exceptions=True)  # its end is seen after the session's
        assert list(session.in_flight) == ["b"]
        second.set_result(None)
        await session.drain()
        assert session.in_flight == {}

    asyncio.run(scenario())


def test_a_finished_call_does_not_forget_a_later_call_under_the_same_id() -> None:
    async def scenario() -> None:
        session = Session("tsk_aaaaaaaa")
        loop = asyncio.get_running_loop()
        old, new = loop.create_future(), loop.create_future()
        session.track(7, old)
        session.track(7, new)
        old.set_result(None)
        await asyncio.gather(old)  # its end is seen after the session's
        assert session.in_flight == {7: new}
        session.cancel_all()
        assert new.cancelled()

    asyncio.run(scenario())


def test_notifications_initialized_marks_the_handshake_done() -> None:
    session = Session("tsk_aaaaaaaa")
    session.notice(msg("notifications/initialized"))
    session.notice(msg("notifications/whatever"))
    assert session.initialized


def _answer(msg_id: Any, result: Any) -> jsonrpc.Message:
    return jsonrpc.parse(orjson.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}))


def test_only_a_client_that_declared_form_elicitation_can_be_asked() -> None:
    async def send(message: dict[str, Any]) -> None:
        return None

    for declared, asks in (
        ({}, False),
        ({"elicitation": {}}, True),
        ({"elicitation": {"form": {}}}, True),
        ({"elicitation": {"url": {}}}, False),
        ({"elicitation": True}, False),
    ):
        session = Session("tsk_aaaaaaaa", client_capabilities=declared)
        assert session.elicits() is asks, declared
        assert (session.asker(send) is not None) is asks and session.asker(None) is None
        assert (session.context(ANYONE, notify=send).elicit is not None) is asks


def test_an_ask_goes_on_the_channel_and_its_answer_comes_back_through_notice() -> None:
    async def scenario() -> None:
        session = Session("tsk_aaaaaaaa", client_capabilities={"elicitation": {}})
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        elicit = session.asker(send)
        assert elicit is not None
        asking = asyncio.create_task(elicit({"mode": "form", "message": "yes?"}, 5))
        while not sent:
            await asyncio.sleep(0)
        [request] = sent
        assert request["method"] == "elicitation/create" and request["params"]["message"] == "yes?"
        session.notice(_answer("someone-else", {"action": "accept"}))  # an unknown id: dropped
        session.notice(_answer(request["id"], {"action": "decline"}))
        assert await asking == {"action": "decline"}
        assert session.asked == {}
        session.notice(_answer(request["id"], {"action": "accept"}))  # too late: dropped

    asyncio.run(scenario())


def test_an_unanswered_ask_gives_up_in_time_and_withdraws_and_a_cancelled_one_leaves_nothing() -> None:
    async def scenario() -> None:
        session = Session("tsk_aaaaaaaa", client_capabilities={"elicitation": {}})
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        assert await session.ask(send, "elicitation/create", {}, 0.05) is None
        assert sent[-1]["method"] == "notifications/cancelled"
        assert sent[-1]["params"]["requestId"] == sent[0]["id"]
        waiting = asyncio.create_task(session.ask(send, "elicitation/create", {}, 30))
        while len(session.asked) == 0:
            await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        assert session.asked == {}

        async def broken(message: dict[str, Any]) -> None:
            raise ConnectionError("gone")

        assert await session.ask(broken, "elicitation/create", {}, 30) is None  # nobody to ask
        error = jsonrpc.parse(b'{"jsonrpc":"2.0","id":"toolspoke-9","error":{"code":-1,"message":"no"}}')
        session.notice(error)  # an error answer resolves nothing that is not waiting

    asyncio.run(scenario())


def test_a_key_is_authenticated_through_the_gateway_fresh_or_remembered(tmp_path: Path) -> None:
    async def scenario(rt: Runtime, who: Principal) -> None:
        assert (await auth.authenticate(rt, API_KEY, fresh=True)) == who
        async with rt.db.write() as tx:
            await keys.revoke(tx, who.key_prefix)
        for fresh in (True, False):
            with pytest.raises(Unauthorized):
                await auth.authenticate(rt, API_KEY, fresh=fresh)

    on_runtime(tmp_path, scenario)
