"""One legacy SSE stream's message handling, in-process: cancellation, limits, big replies.

``rpc.mcp.respond`` is replaced by a stub whose requests wait on an event, so these check
what the face does with in-flight work without any server or upstream.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from appliance.errors import InvalidRequest
from appliance.models import Principal
from appliance.rpc import jsonrpc
from appliance.web import sse

WHO = Principal(user_id=1, name="t", is_admin=False, key_prefix="tsk_abcdefgh")
RT: Any = object()  # the stub never touches the runtime


def msg(method: str, msg_id: Any = None, **params: Any) -> jsonrpc.Message:
    doc: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if msg_id is not None:
        doc["id"] = msg_id
    return jsonrpc.parse(orjson.dumps(doc))


def event(raw: bytes | None) -> dict[str, Any]:
    assert raw is not None and raw.startswith(b"event: message\ndata: ") and raw.endswith(b"\n\n")
    return dict(orjson.loads(raw.removeprefix(b"event: message\ndata: ")))


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Requests named ``slow`` wait for this; everything else answers at once."""
    opened = asyncio.Event()

    async def respond(rt: Any, ctx: Any, m: jsonrpc.Message) -> dict[str, Any]:
        if m.method == "initialize":
            return jsonrpc.result(m.id, {"protocolVersion": m.params["protocolVersion"]})
        if m.method == "slow":
            await opened.wait()
        if m.method == "big":
            return jsonrpc.result(m.id, {"content": [{"type": "text", "text": "x" * sse.MAX_EVENT_BYTES}]})
        return jsonrpc.result(m.id, {"method": m.method, "version": ctx.protocol_version})

    monkeypatch.setattr(sse.mcp, "respond", respond)
    return opened


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=10))


async def initialized(stream: sse.Stream) -> None:
    await stream.receive(RT, WHO, None, msg("initialize", 0, protocolVersion="2025-06-18"))
    assert event(await stream.outbox.get())["result"]["protocolVersion"] == "2025-06-18"


def test_a_cancelled_request_is_never_answered_and_is_forgotten(gate: asyncio.Event) -> None:
    async def scenario() -> None:
        stream = sse.Stream("s", WHO.key_prefix, None, None)
        await initialized(stream)
        await stream.receive(RT, WHO, None, msg("slow", 1))
        task = stream.tasks[1]
        await stream.receive(RT, WHO, None, msg("notifications/cancelled", requestId=1))
        await asyncio.wait([task], timeout=5)
        assert task.cancelled() and stream.tasks == {}
        await stream.receive(RT, WHO, None, msg("ping", 2))
        reply = event(await stream.outbox.get())
        assert reply["id"] == 2 and reply["result"]["version"] == "2025-06-18"  # remembered
        assert stream.outbox.empty()

    run(scenario())


def test_requests_before_initialize_get_an_error_except_ping(gate: asyncio.Event) -> None:
    async def scenario() -> None:
        stream = sse.Stream("s", WHO.key_prefix, None, None)
        await stream.receive(RT, WHO, None, msg("server/discover", 1))
        assert event(await stream.outbox.get())["error"]["code"] == -32600
        await stream.receive(RT, WHO, None, msg("ping", 2))
        assert "result" in event(await stream.outbox.get())

    run(scenario())


def test_in_flight_requests_are_bounded_and_closing_cancels_them(gate: asyncio.Event) -> None:
    async def scenario() -> None:
        stream = sse.Stream("s", WHO.key_prefix, None, None)
        await initialized(stream)
        for i in range(sse.MAX_IN_FLIGHT):
            await stream.receive(RT, WHO, None, msg("slow", i + 1))
        with pytest.raises(sse.TooManyInFlight):
            await stream.receive(RT, WHO, None, msg("slow", 999))
        tasks = list(stream.tasks.values())
        stream.close()
        await asyncio.wait(tasks, timeout=5)
        assert all(t.cancelled() for t in tasks) and stream.tasks == {}
        assert stream.outbox.get_nowait() is None  # the writer's wake-up, and no answers

    run(scenario())


def test_a_reply_over_the_event_limit_becomes_an_error_the_client_can_read(gate: asyncio.Event) -> None:
    async def scenario() -> None:
        stream = sse.Stream("s", WHO.key_prefix, None, None)
        await initialized(stream)
        await stream.receive(RT, WHO, None, msg("big", 1))
        raw = await stream.outbox.get()
        assert raw is not None and len(raw) < sse.MAX_EVENT_BYTES
        assert event(raw)["error"]["data"]["reason"] == "response_too_large"

    run(scenario())


def test_a_tool_result_over_the_limit_becomes_an_is_error_result() -> None:
    big = jsonrpc.result(
        7, {"content": [{"type": "text", "text": "x" * sse.MAX_EVENT_BYTES}], "isError": False}
    )
    reply = event(sse._event(big, msg("tools/call", 7, name="t")))
    assert reply["id"] == 7 and reply["result"]["isError"] is True
    assert reply["result"]["_meta"]["toolspoke/reason"] == "response_too_large"
    assert "/mcp" in reply["result"]["content"][0]["text"]


def test_a_duplicate_running_id_is_refused_and_odd_cancellations_are_ignored(gate: asyncio.Event) -> None:
    async def scenario() -> None:
        stream = sse.Stream("s", WHO.key_prefix, None, None)
        await initialized(stream)
        await stream.receive(RT, WHO, None, msg("slow", 1))
        with pytest.raises(InvalidRequest, match="still running"):
            await stream.receive(RT, WHO, None, msg("slow", 1))
        for odd in ({"x": 1}, [1], True, None, "1"):
            await stream.receive(RT, WHO, None, msg("notifications/cancelled", requestId=odd))
        assert not stream.tasks[1].done()
        gate.set()
        assert event(await stream.outbox.get())["id"] == 1
        assert stream.outbox.empty()

    run(scenario())
