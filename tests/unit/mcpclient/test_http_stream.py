"""Streaming pieces under the MCP HTTP transports: ``Egress.stream`` and the SSE decoder.

``Egress.stream`` talks to the programmable loopback upstream of the egress tests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from appliance.egress.guard import EgressPolicy
from appliance.egress.transport import Egress
from appliance.errors import UpstreamError
from appliance.mcpclient.http_transport import SseDecoder, SseEvent
from appliance.protocol.param_headers import encode as _header_value
from tests.support.recording_upstream import RecordingServer, serving

LOOPBACK_OPEN = ("127.0.0.1/32",)


@pytest.fixture
def upstream() -> Iterator[RecordingServer]:
    with serving() as server:
        yield server


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- SSE decoder --------------------------------------------------------------------------


def feed_all(chunks: list[bytes], cap: int = 1 << 20) -> list[SseEvent]:
    decoder = SseDecoder(cap)
    return [event for chunk in chunks for event in decoder.feed(chunk)]


def test_sse_events_survive_any_chunking_and_any_line_ending() -> None:
    stream = b': keep-alive\r\nid: 1\r\ndata: \r\n\r\nevent: message\r\ndata: {"a":\r\ndata: 1}\r\n\r\n'
    stream += b"data: two\n\nevent: endpoint\rdata: /post?x=1\r\r"
    expected = [
        SseEvent("message", b'{"a":\n1}'),
        SseEvent("message", b"two"),
        SseEvent("endpoint", b"/post?x=1"),
    ]
    assert feed_all([stream]) == expected
    assert feed_all([stream[i : i + 1] for i in range(len(stream))]) == expected  # byte by byte
    split_crlf = stream.index(b"\r\n") + 1
    assert feed_all([stream[:split_crlf], stream[split_crlf:]]) == expected


def test_an_sse_event_far_above_one_mib_passes_up_to_the_cap() -> None:
    payload = b"x" * (3 << 20)
    body = b"data: " + payload + b"\n\n"
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    started = time.monotonic()
    events = feed_all(chunks, cap=4 << 20)
    assert events == [SseEvent("message", payload)]
    assert time.monotonic() - started < 2  # linear, not quadratic, in the event size


def test_an_sse_event_above_the_cap_is_upstream_too_large() -> None:
    """UP-04: a single SSE event above the cap is upstream_too_large."""
    with pytest.raises(UpstreamError) as info:
        feed_all([b"data: " + b"x" * 2000], cap=1000)  # refused before the event even ends
    assert info.value.reason == "upstream_too_large"
    with pytest.raises(UpstreamError):
        feed_all([b"data: " + b"x" * 600 + b"\ndata: " + b"y" * 600 + b"\n"], cap=1000)


def test_header_values_outside_plain_ascii_use_the_base64_sentinel() -> None:
    assert _header_value("get_weather") == "get_weather"
    assert _header_value("Hello, 世界") == "=?base64?SGVsbG8sIOS4lueVjA==?="
    assert _header_value(" padded ") == "=?base64?IHBhZGRlZCA=?="
    assert _header_value("line1\nline2") == "=?base64?bGluZTEKbGluZTI=?="
    assert _header_value("=?base64?literal?=") == "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="


# -- Egress.stream ------------------------------------------------------------------------


def test_stream_yields_the_body_in_chunks_under_the_cap(upstream: RecordingServer) -> None:
    async def main() -> None:
        async with Egress(EgressPolicy(LOOPBACK_OPEN), max_bytes=2 << 20) as egress:
            async with egress.stream("GET", f"{upstream.base}/big-stream") as answer:
                assert answer.status == 200 and answer.content_type == "text/plain"
                sizes = [len(chunk) async for chunk in answer.chunks]
            assert sum(sizes) == 1 << 20 and len(sizes) > 1
            async with egress.stream("GET", f"{upstream.base}/gzip") as answer:
                assert await answer.read() == b"hello gzip"

    run(main())


def test_stream_enforces_the_byte_cap_while_reading(upstream: RecordingServer) -> None:
    """UP-04: a stream is cut at the cap while reading (chunked, endless)."""

    async def main() -> None:
        async with Egress(EgressPolicy(LOOPBACK_OPEN), max_bytes=256 * 1024) as egress:
            with pytest.raises(UpstreamError) as info:
                async with egress.stream("GET", f"{upstream.base}/big-stream") as answer:
                    await answer.read()
            assert info.value.reason == "upstream_too_large"
            with pytest.raises(UpstreamError) as info:
                async with egress.stream("GET", f"{upstream.base}/bomb") as answer:
                    await answer.read()
            assert info.value.reason == "upstream_too_large"

    run(main())


def test_stream_has_a_total_deadline_that_covers_reading(upstream: RecordingServer) -> None:
    """UP-01: the deadline covers reading a stream, not only its headers."""

    async def main() -> None:
        async with Egress(EgressPolicy(LOOPBACK_OPEN)) as egress:
            started = time.monotonic()
            with pytest.raises(UpstreamError) as info:
                async with egress.stream("GET", f"{upstream.base}/trickle", timeout_s=0.5) as answer:
                    await answer.read()
            assert info.value.reason == "upstream_timeout"
            assert time.monotonic() - started < 2

    run(main())


def test_stream_refuses_redirects_and_blocked_addresses(upstream: RecordingServer) -> None:
    """SSRF-09 / I-1: the MCP stream path refuses redirects and blocked addresses."""

    async def main() -> None:
        async with Egress(EgressPolicy(LOOPBACK_OPEN)) as egress:
            with pytest.raises(UpstreamError) as info:
                async with egress.stream("GET", f"{upstream.base}/redirect"):
                    pass
            assert info.value.reason == "upstream_redirect"
        async with Egress(EgressPolicy()) as closed:
            with pytest.raises(UpstreamError) as info:
                async with closed.stream("GET", f"{upstream.base}/big"):
                    pass
            assert info.value.reason == "ssrf_blocked"
        assert upstream.connections == 1  # only the redirect request left the process

    run(main())
