"""The MCP client session against a scripted in-process transport: the protocol edge cases.

Each test scripts what the "server" answers to every message the session sends; nothing
touches the network. Async tests run under ``asyncio.run`` (no pytest-asyncio).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from appliance.errors import UpstreamError
from appliance.mcpclient.session import LogRelay, McpSession, Refused, SessionExpired
from tests.support.waits import until

Script = Callable[[dict[str, Any], "FakeTransport"], Awaitable[None] | None]
MODERN_KEY = "io.modelcontextprotocol/protocolVersion"


class FakeTransport:
    """A transport whose far side is a Python function called for every sent message."""

    def __init__(self, script: Script, *, inline: bool = False, scoped: bool = False) -> None:
        self.script = script
        self.inline_answers = inline
        self.request_scoped = scoped
        self.sent: list[dict[str, Any]] = []
        self.version: tuple[str, bool] | None = None
        self.closed = False
        self.session: McpSession | None = None

    async def start(self, session: McpSession) -> None:
        self.session = session

    async def send(self, message: dict[str, Any], *, timeout_s: float | None = None) -> None:
        self.sent.append(message)
        outcome = self.script(message, self)
        if outcome is not None:
            await outcome

    def negotiated(self, version: str, *, modern: bool) -> None:
        self.version = (version, modern)

    async def aclose(self) -> None:
        self.closed = True

    def reply(self, message: Any, origin: Any = None) -> None:
        assert self.session is not None
        self.session.deliver(message, origin)

    def sent_methods(self) -> list[str]:
        return [m.get("method", "<reply>") for m in self.sent]


def ok(request: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


INIT_RESULT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"tools": {"listChanged": True}},
    "serverInfo": {"name": "fake", "version": "1"},
    "instructions": "be nice",
}
DISCOVER_RESULT = {
    "supportedVersions": ["2026-07-28"],
    "capabilities": {"tools": {}},
    "instructions": "modern",
    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "modern-fake", "version": "2"}},
}
ADD_RESULT = {"content": [{"type": "text", "text": "3"}], "structuredContent": {"result": 3}}


def legacy_server(handler: Script | None = None) -> Script:
    """Refuses discover (-32601), answers initialize, then hands everything else on."""

    def script(message: dict[str, Any], t: FakeTransport) -> Awaitable[None] | None:
        method = message.get("method")
        if method == "server/discover":
            t.reply({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "nope"}})
        elif method == "initialize":
            t.reply(ok(message, INIT_RESULT))
        elif method == "notifications/initialized":
            pass
        elif handler is not None:
            return handler(message, t)
        return None

    return script


def run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        async with asyncio.timeout(20):
            return await coro

    return asyncio.run(main())


async def connected(script: Script, **kw: Any) -> tuple[McpSession, FakeTransport]:
    transport = FakeTransport(script, **kw)
    session = McpSession(transport)
    await session.connect(timeout_s=5)
    return session, transport


# -- eras ---------------------------------------------------------------------------------


def test_a_server_that_answers_discover_gets_the_modern_era_and_meta_on_every_request() -> None:
    def script(message: dict[str, Any], t: FakeTransport) -> None:
        if message["method"] == "server/discover":
            t.reply(ok(message, DISCOVER_RESULT))
        else:
            t.reply(ok(message, ADD_RESULT))

    async def main() -> None:
        session, t = await connected(script)
        result = await session.call_tool("add", {"a": 1, "b": 2}, timeout_s=5)
        assert result["structuredContent"] == {"result": 3}
        assert session.protocol_version == "2026-07-28" and session.modern
        assert session.server_info == {"name": "modern-fake", "version": "2"}
        assert session.capabilities == {"tools": {}} and session.instructions == "modern"
        assert t.version == ("2026-07-28", True)
        await session.ping()  # 2026-07-28 has no ping: discover is the liveness check
        assert t.sent_methods() == ["server/discover", "tools/call", "server/discover"]
        for sent in t.sent:
            meta = sent["params"]["_meta"]
            assert meta[MODERN_KEY] == "2026-07-28"
            assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "toolspoke"
            assert meta["io.modelcontextprotocol/clientCapabilities"] == {}
        await session.aclose()
        assert t.closed

    run(main())


@pytest.mark.parametrize(
    "refusal",
    [
        "method_not_found",
        "http_404",
        "http_405",
        "legacy_only_discover",
        "empty_result",  # a legacy server answering unknown requests with {} (conformance suite)
        "unsupported_version_with_legacy",
    ],
)
def test_a_server_that_refuses_discover_gets_the_initialize_handshake(refusal: str) -> None:
    def script(message: dict[str, Any], t: FakeTransport) -> None:
        method = message.get("method")
        if method == "server/discover":
            if refusal.startswith("http_"):
                raise Refused("refused", status=int(refusal[5:]))
            if refusal == "legacy_only_discover":
                t.reply(ok(message, {"supportedVersions": ["2025-11-25"], "capabilities": {}}))
                return
            if refusal == "empty_result":
                t.reply(ok(message, {}))
                return
            code = -32022 if refusal.startswith("unsupported") else -32601
            data = {"supported": ["2025-11-25", "2025-06-18"]}
            t.reply(
                {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "error": {"code": code, "message": "no", "data": data},
                }
            )
        elif method == "initialize":
            assert MODERN_KEY not in message["params"].get("_meta", {})
            t.reply(ok(message, INIT_RESULT))
        elif method == "ping":
            t.reply(ok(message, {}))

    async def main() -> None:
        session, t = await connected(script)
        await session.ping()
        assert session.protocol_version == "2025-11-25" and not session.modern
        assert session.server_info["name"] == "fake" and session.instructions == "be nice"
        assert t.sent_methods() == ["server/discover", "initialize", "notifications/initialized", "ping"]
        assert "_meta" not in t.sent[-1]["params"]
        await session.aclose()

    run(main())


def test_a_modern_only_server_with_no_common_version_is_upstream_invalid() -> None:
    def script(message: dict[str, Any], t: FakeTransport) -> None:
        error = {"code": -32022, "message": "no", "data": {"supported": ["2027-01-01"]}}
        t.reply({"jsonrpc": "2.0", "id": message["id"], "error": error})

    async def main() -> None:
        with pytest.raises(UpstreamError) as info:
            await connected(script)
        assert info.value.reason == "upstream_invalid"

    run(main())


def test_an_outage_during_discover_is_not_taken_for_a_legacy_server() -> None:
    def script(message: dict[str, Any], t: FakeTransport) -> None:
        raise UpstreamError("connection refused", reason="upstream_unavailable")

    async def main() -> None:
        transport = FakeTransport(script)
        with pytest.raises(UpstreamError) as info:
            await McpSession(transport).connect(timeout_s=5)
        assert info.value.reason == "upstream_unavailable"
        assert transport.sent_methods() == ["server/discover"]

    run(main())


# -- correlation and malformed answers ----------------------------------------------------


def test_answers_arriving_out_of_order_reach_their_own_callers() -> None:
    held: list[dict[str, Any]] = []

    def handler(message: dict[str, Any], t: FakeTransport) -> None:
        held.append(message)
        if len(held) == 3:  # answer the three calls in reverse order
            for request in reversed(held):
                name = request["params"]["name"]
                t.reply(ok(request, {"content": [{"type": "text", "text": name}]}))

    async def main() -> None:
        session, _ = await connected(legacy_server(handler))
        results = await asyncio.gather(*(session.call_tool(n, {}, timeout_s=5) for n in ("a", "b", "c")))
        assert [r["content"][0]["text"] for r in results] == ["a", "b", "c"]
        await session.aclose()

    run(main())


def test_an_answer_with_the_wrong_id_on_a_request_stream_fails_that_request_and_settles_no_other() -> None:
    """UP-06: an answer with the wrong id fails that request and settles no other."""

    async def main() -> None:
        requests: list[dict[str, Any]] = []

        def handler(message: dict[str, Any], t: FakeTransport) -> None:
            requests.append(message)
            if message["params"]["name"] == "second":
                first = requests[0]
                # B's stream carries A's id (and A's would-be result): A must not get it.
                t.reply(ok(first, {"content": [{"type": "text", "text": "stolen"}]}), message["id"])

        session, _ = await connected(legacy_server(handler))
        first = asyncio.create_task(session.call_tool("first", {}, timeout_s=0.5))
        await asyncio.sleep(0)
        with pytest.raises(UpstreamError) as info:
            await session.call_tool("second", {}, timeout_s=5)
        assert info.value.reason == "upstream_invalid"
        with pytest.raises(UpstreamError) as info:
            await first
        assert info.value.reason == "upstream_timeout"  # never the stolen result
        await session.aclose()

    run(main())


MALFORMED: dict[str, Callable[[dict[str, Any]], Any]] = {
    "result_and_error": lambda r: {
        "jsonrpc": "2.0",
        "id": r["id"],
        "result": ADD_RESULT,
        "error": {"code": 1, "message": "x"},
    },
    "neither_result_nor_error": lambda r: {"jsonrpc": "2.0", "id": r["id"]},
    "no_jsonrpc": lambda r: {"id": r["id"], "result": ADD_RESULT},
    "content_not_array": lambda r: ok(r, {"content": {"type": "text", "text": "3"}}),
    "content_block_untyped": lambda r: ok(r, {"content": [{"text": "3"}]}),
    "is_error_not_bool": lambda r: ok(r, {"content": [], "isError": "yes"}),
    "result_not_object": lambda r: ok(r, ["3"]),
    "error_code_string": lambda r: {
        "jsonrpc": "2.0",
        "id": r["id"],
        "error": {"code": "-32603", "message": "x"},
    },
    "error_message_missing": lambda r: {"jsonrpc": "2.0", "id": r["id"], "error": {"code": -32603}},
    "input_required": lambda r: ok(r, {"resultType": "input_required", "inputRequests": {}}),
    "not_an_object": lambda r: b"garbage{",
    "null_id": lambda r: {"jsonrpc": "2.0", "id": None, "result": ADD_RESULT},
}


@pytest.mark.parametrize("shape", sorted(MALFORMED))
def test_a_malformed_answer_fails_its_request_as_upstream_invalid_without_waiting(shape: str) -> None:
    """UP-06: result and error together, no jsonrpc, string error codes: upstream_invalid at once."""

    def handler(message: dict[str, Any], t: FakeTransport) -> None:
        t.reply(MALFORMED[shape](message))  # no origin: the session must still attribute it

    async def main() -> None:
        session, _ = await connected(legacy_server(handler))
        started = time.monotonic()
        with pytest.raises(UpstreamError) as info:
            await session.call_tool("add", {}, timeout_s=10)
        assert info.value.reason == "upstream_invalid"
        assert time.monotonic() - started < 2  # failed at once, not at the deadline
        await session.aclose()

    run(main())


def test_a_json_rpc_error_answer_becomes_upstream_error_with_its_code_and_message() -> None:
    def handler(message: dict[str, Any], t: FakeTransport) -> None:
        error = {"code": -32602, "message": "unknown tool: nope", "data": {"secret": "x"}}
        t.reply({"jsonrpc": "2.0", "id": message["id"], "error": error})

    async def main() -> None:
        session, _ = await connected(legacy_server(handler))
        with pytest.raises(UpstreamError) as info:
            await session.call_tool("nope", {}, timeout_s=5)
        assert info.value.reason == "upstream_error"
        assert info.value.data == {"code": -32602}
        assert "unknown tool: nope" in info.value.public_message
        await session.aclose()

    run(main())


def test_a_late_or_duplicate_answer_is_dropped_without_harm() -> None:
    """UP-03: a late answer after a cancel is dropped, never delivered to another request."""

    def handler(message: dict[str, Any], t: FakeTransport) -> None:
        t.reply(ok(message, ADD_RESULT))
        t.reply(ok(message, {"content": [{"type": "text", "text": "again"}]}))
        t.reply(ok({"id": 999}, ADD_RESULT))

    async def main() -> None:
        session, _ = await connected(legacy_server(handler))
        assert (await session.call_tool("add", {}, timeout_s=5))["structuredContent"] == {"result": 3}
        assert (await session.call_tool("add", {}, timeout_s=5))["structuredContent"] == {"result": 3}
        assert session.dropped == 4
        await session.aclose()

    run(main())


def test_an_inline_transport_that_ends_without_the_answer_is_upstream_invalid() -> None:
    def script(message: dict[str, Any], t: FakeTransport) -> None:
        if message["method"] == "server/discover":
            t.reply(ok(message, DISCOVER_RESULT), message["id"])
        # tools/call: the stream ends with nothing on it

    async def main() -> None:
        session, _ = await connected(script, inline=True, scoped=True)
        with pytest.raises(UpstreamError) as info:
            await session.call_tool("add", {}, timeout_s=5)
        assert info.value.reason == "upstream_invalid"
        await session.aclose()

    run(main())


# -- server-initiated messages ------------------------------------------------------------


def test_server_initiated_requests_are_answered_method_not_found_and_never_relayed() -> None:
    """UP-06: sampling, elicitation and roots requests are answered -32601 and never relayed."""
    asks = ["sampling/createMessage", "elicitation/create", "roots/list", "anything/else"]
    progress: list[dict[str, Any]] = []

    def handler(message: dict[str, Any], t: FakeTransport) -> None:
        if message.get("method") != "tools/call":
            return  # our -32601 replies
        for n, ask in enumerate(asks):
            t.reply({"jsonrpc": "2.0", "id": f"s{n}", "method": ask, "params": {}})
        t.reply(ok(message, ADD_RESULT))

    async def main() -> None:
        session, t = await connected(legacy_server(handler))
        result = await session.call_tool("add", {}, timeout_s=5, on_progress=progress.append)
        assert result["structuredContent"] == {"result": 3}
        for _ in range(50):
            if sum(1 for m in t.sent if "error" in m) == len(asks):
                break
            await asyncio.sleep(0.01)
        replies = {m["id"]: m["error"]["code"] for m in t.sent if "error" in m}
        assert replies == {f"s{n}": -32601 for n in range(len(asks))}
        assert progress == []
        await session.aclose()

    run(main())


def test_progress_reaches_the_callback_of_its_own_request_only() -> None:
    """UP-03: progress reaches its own request only; the deadline still holds."""
    seen: dict[str, list[float]] = {"a": [], "b": []}

    async def async_cb(params: dict[str, Any]) -> None:
        seen["b"].append(params["progress"])

    held: list[dict[str, Any]] = []

    def handler(message: dict[str, Any], t: FakeTransport) -> None:
        held.append(message)
        if len(held) < 2:
            return
        for step in (1, 2):
            for request in held:
                token = request["params"]["_meta"]["progressToken"]
                note = {"progressToken": token, "progress": step, "total": 2}
                t.reply({"jsonrpc": "2.0", "method": "notifications/progress", "params": note})
        t.reply({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "zz"}})
        for request in held:
            t.reply(ok(request, ADD_RESULT))

    async def main() -> None:
        session, _ = await connected(legacy_server(handler))
        await asyncio.gather(
            session.call_tool("a", {}, timeout_s=5, on_progress=lambda p: seen["a"].append(p["progress"])),
            session.call_tool("b", {}, timeout_s=5, on_progress=async_cb),
        )
        await until("the async callback's task to run", lambda: seen["b"] == [1, 2])
        assert seen == {"a": [1, 2], "b": [1, 2]}
        await session.aclose()

    run(main())


def test_tools_list_changed_reaches_the_session_callback() -> None:
    changes: list[bool] = []

    def handler(message: dict[str, Any], t: FakeTransport) -> None:
        t.reply({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        t.reply(ok(message, {}))

    async def main() -> None:
        transport = FakeTransport(legacy_server(handler))
        session = McpSession(transport, on_tools_changed=lambda: changes.append(True))
        await session.connect(timeout_s=5)
        await session.ping()
        assert changes == [True]
        await session.aclose()

    run(main())


# -- deadlines, cancellation, lost connections --------------------------------------------


def test_a_silent_upstream_times_out_and_is_told_the_request_was_cancelled() -> None:
    """UP-01 / UP-03: a silent upstream is upstream_timeout and notifications/cancelled is sent."""

    async def main() -> None:
        session, t = await connected(legacy_server(lambda m, t: None))
        started = time.monotonic()
        with pytest.raises(UpstreamError) as info:
            await session.call_tool("slow", {}, timeout_s=0.2)
        assert info.value.reason == "upstream_timeout"
        assert time.monotonic() - started < 1.5
        await until(
            "the cancellation sent", lambda: any(m.get("method") == "notifications/cancelled" for m in t.sent)
        )
        call = next(m for m in t.sent if m.get("method") == "tools/call")
        cancels = [m for m in t.sent if m.get("method") == "notifications/cancelled"]
        assert [c["params"]["requestId"] for c in cancels] == [call["id"]]
        await session.aclose()

    run(main())


def test_a_hanging_send_is_cut_at_the_deadline_too() -> None:
    """UP-09: a write to an upstream that does not read is bounded by the deadline."""

    async def hang(message: dict[str, Any], t: FakeTransport) -> None:
        if message.get("method") == "tools/call":
            await asyncio.sleep(30)

    async def main() -> None:
        session, _ = await connected(legacy_server(hang))
        with pytest.raises(UpstreamError) as info:
            await session.call_tool("slow", {}, timeout_s=0.2)
        assert info.value.reason == "upstream_timeout"
        await session.aclose()

    run(main())


def test_a_cancelled_caller_cancels_the_request_upstream() -> None:
    async def main() -> None:
        session, t = await connected(legacy_server(lambda m, t: None))
        task = asyncio.create_task(session.call_tool("slow", {}, timeout_s=30))
        await until("the call sent", lambda: any(m.get("method") == "tools/call" for m in t.sent))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until("the cancellation sent", lambda: t.sent[-1].get("method") == "notifications/cancelled")
        assert [m["method"] for m in t.sent[-2:]] == ["tools/call", "notifications/cancelled"]
        await session.aclose()

    run(main())


def test_the_modern_era_on_a_request_scoped_transport_cancels_by_closing_not_by_notice() -> None:
    def script(message: dict[str, Any], t: FakeTransport) -> None:
        if message["method"] == "server/discover":
            t.reply(ok(message, DISCOVER_RESULT), message["id"])
        elif message["method"] == "tools/call":
            t.reply({"jsonrpc": "2.0", "id": "s1", "method": "roots/list"}, message["id"])

    async def main() -> None:
        transport = FakeTransport(script, scoped=True)
        session = McpSession(transport)
        await session.connect(timeout_s=5)
        with pytest.raises(UpstreamError):
            await session.call_tool("slow", {}, timeout_s=0.1)
        # An absence: nothing to wait for, so a moment for a wrongly sent message to show.
        await asyncio.sleep(0.01)
        # No notifications/cancelled and no reply POSTs: neither exists in this era on HTTP.
        assert transport.sent_methods() == ["server/discover", "tools/call"]
        await session.aclose()

    run(main())


def test_a_lost_connection_fails_every_open_request_and_later_ones() -> None:
    """UP-08: a lost connection fails every open request at once."""

    async def main() -> None:
        session, t = await connected(legacy_server(lambda m, t: None))
        calls = [asyncio.create_task(session.call_tool("x", {}, timeout_s=30)) for _ in range(3)]
        await until(
            "the three calls sent", lambda: [m.get("method") for m in t.sent].count("tools/call") == 3
        )
        session.closed(UpstreamError("the stream closed", reason="upstream_unavailable"))
        for call in calls:
            with pytest.raises(UpstreamError) as info:
                await call
            assert info.value.reason == "upstream_unavailable"
        with pytest.raises(UpstreamError) as info:
            await session.ping()
        assert info.value.reason == "upstream_unavailable"
        await session.aclose()

    run(main())


# -- session expiry (2025 era) ------------------------------------------------------------


@pytest.mark.parametrize("expiries", [1, 2])
def test_an_expired_session_reinitialises_once_and_retries_the_call_once(expiries: int) -> None:
    """UP-06: on a 404 for the session, re-initialise once and retry at most once."""
    state = {"left": expiries}

    def handler(message: dict[str, Any], t: FakeTransport) -> None:
        if message.get("method") == "tools/call":
            if state["left"] > 0:
                state["left"] -= 1
                raise SessionExpired()
            t.reply(ok(message, ADD_RESULT))

    async def main() -> None:
        session, t = await connected(legacy_server(handler))
        if expiries == 1:
            result = await session.call_tool("add", {}, timeout_s=5)
            assert result["structuredContent"] == {"result": 3}
        else:
            with pytest.raises(UpstreamError) as info:
                await session.call_tool("add", {}, timeout_s=5)
            assert info.value.reason == "upstream_unavailable"
        methods = t.sent_methods()
        assert methods.count("tools/call") == 2  # never more than one retry
        assert methods.count("initialize") == 2  # the original and one re-initialise
        await session.aclose()

    run(main())


def test_concurrent_calls_that_see_one_expiry_share_one_reinitialise() -> None:
    """UP-06: concurrent calls that see one expiry share one re-initialise, never a loop."""
    state = {"waiting": 0}

    async def handler(message: dict[str, Any], t: FakeTransport) -> None:
        if message.get("method") != "tools/call":
            return
        if t.sent_methods().count("initialize") == 1:  # still the first, now forgotten, session
            state["waiting"] += 1
            while state["waiting"] < 3:
                await asyncio.sleep(0.005)
            raise SessionExpired()
        t.reply(ok(message, ADD_RESULT))

    async def main() -> None:
        session, t = await connected(legacy_server(handler))
        await asyncio.gather(*(session.call_tool(f"c{n}", {}, timeout_s=5) for n in range(3)))
        assert t.sent_methods().count("initialize") == 2
        assert t.sent_methods().count("tools/call") == 6
        await session.aclose()

    run(main())


# -- tools/list paging --------------------------------------------------------------------


def test_list_tools_follows_cursors_and_refuses_a_cursor_loop() -> None:
    def pages(loop: bool) -> Script:
        def handler(message: dict[str, Any], t: FakeTransport) -> None:
            cursor = message["params"].get("cursor")
            if cursor is None:
                t.reply(ok(message, {"tools": [{"name": "a"}], "nextCursor": "c1"}))
            elif cursor == "c1":
                t.reply(ok(message, {"tools": [{"name": "b"}], "nextCursor": "c1" if loop else "c2"}))
            else:
                t.reply(ok(message, {"tools": [{"name": "c"}]}))

        return legacy_server(handler)

    async def main() -> None:
        session, _ = await connected(pages(loop=False))
        assert [t["name"] for t in await session.list_tools()] == ["a", "b", "c"]
        await session.aclose()
        session, _ = await connected(pages(loop=True))
        with pytest.raises(UpstreamError) as info:
            await session.list_tools()
        assert info.value.reason == "upstream_invalid"
        await session.aclose()

    run(main())


def test_log_messages_reach_their_own_call_at_its_level_before_its_answer() -> None:
    """On a request's stream (origin known) and, on stdio, to the only call running."""
    events: list[str] = []

    async def slow_deliver(params: dict[str, Any]) -> None:
        await asyncio.sleep(0)  # a relay that yields still lands before the answer
        events.append(f"{params['level']}:{params['data']}")

    def handler(message: dict[str, Any], t: FakeTransport) -> None:
        for level in ("debug", "warning", "error", "bogus"):
            note = {"level": level, "data": message["params"]["name"]}
            t.reply({"jsonrpc": "2.0", "method": "notifications/message", "params": note}, message["id"])
        note = {"level": "error", "data": "stray"}
        t.reply({"jsonrpc": "2.0", "method": "notifications/message", "params": note}, 999)
        t.reply(ok(message, ADD_RESULT))

    async def main() -> None:
        session, transport = await connected(legacy_server(handler))
        relay = LogRelay("warning", slow_deliver)
        result = await session.call_tool("a", {}, timeout_s=5, on_log=relay)
        events.append("answer")
        assert result == ADD_RESULT
        assert events == ["warning:a", "error:a", "answer"]
        # A legacy upstream is not asked for a level in _meta; it filters nothing itself.
        assert "io.modelcontextprotocol/logLevel" not in transport.sent[-1]["params"].get("_meta", {})
        await session.aclose()

    run(main())


def test_a_modern_upstream_is_asked_for_the_callers_log_level_and_unrouted_logs_need_one_call() -> None:
    seen: list[Any] = []

    def script(message: dict[str, Any], t: FakeTransport) -> None:
        if message.get("method") == "server/discover":
            t.reply(ok(message, DISCOVER_RESULT))
        elif message.get("method") == "tools/call":
            assert message["params"]["_meta"]["io.modelcontextprotocol/logLevel"] == "info"
            note = {"level": "info", "data": "no origin"}  # stdio: nothing names the request
            t.reply({"jsonrpc": "2.0", "method": "notifications/message", "params": note})
            t.reply(ok(message, ADD_RESULT))

    async def main() -> None:
        session, _ = await connected(script)
        await session.call_tool("a", {}, timeout_s=5, on_log=LogRelay("info", seen.append))
        assert seen == [{"level": "info", "data": "no origin"}]
        await session.aclose()

    run(main())


def test_over_streamable_http_a_tool_with_an_invalid_x_mcp_header_is_left_out_of_the_listing() -> None:
    good = {"name": "good", "inputSchema": {"properties": {"r": {"type": "string", "x-mcp-header": "R"}}}}
    bad = {"name": "bad", "inputSchema": {"properties": {"n": {"type": "number", "x-mcp-header": "N"}}}}

    def handler(message: dict[str, Any], t: FakeTransport) -> None:
        t.reply(ok(message, {"tools": [good, bad]}))

    async def main() -> list[list[str]]:
        names = []
        for mirrors in (True, False):
            session, transport = await connected(legacy_server(handler))
            transport.mirrors_headers = mirrors  # type: ignore[attr-defined]
            names.append([t["name"] for t in await session.list_tools()])
            await session.aclose()
        return names

    assert run(main()) == [["good"], ["good", "bad"]]
