"""The egress client's own HTTP/1.1 (``egress/http1.py``) against scripted raw servers.

Each server is a real socket on loopback that answers every request with the bytes a test
gives it, so framing cases that well-behaved servers never produce (chunked bodies with
trailers, interim answers, both Content-Length and Transfer-Encoding, closes mid-body) are
driven byte for byte through ``Egress``, the way a tool call reaches them.
"""

from __future__ import annotations

import asyncio

import pytest

from appliance.egress.guard import EgressPolicy
from appliance.egress.http1 import Body, Pool
from appliance.egress.transport import Egress
from appliance.errors import UpstreamError

OPEN = ("127.0.0.1/32",)


class Scripted:
    """Answers request n with ``answers[n]`` (the last one from then on); counts connections."""

    def __init__(self, *answers: bytes, close_after: bool = False) -> None:
        self.answers = answers
        self.close_after = close_after
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                request = head + (await reader.readexactly(length) if length else b"")
                self.requests.append(request)
                writer.write(self.answers[min(len(self.requests), len(self.answers)) - 1])
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def run(server: Scripted, calls: int = 1, **send: object) -> tuple[list[object], Scripted]:
    """``calls`` sequential GETs through an Egress; each result is a response or the error."""

    async def main() -> list[object]:
        async with asyncio.timeout(20):
            listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
            port = listener.sockets[0].getsockname()[1]
            out: list[object] = []
            try:
                async with Egress(EgressPolicy(OPEN), timeout_s=5) as egress:
                    for _ in range(calls):
                        try:
                            out.append(await egress.send("GET", f"http://127.0.0.1:{port}/x", **send))  # type: ignore[arg-type]
                        except UpstreamError as exc:
                            out.append(exc)
            finally:
                listener.close()
            return out

    return asyncio.run(main()), server


def test_a_chunked_body_with_extensions_and_trailers_is_joined_and_the_connection_reused() -> None:
    answer = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: yes\r\n\r\n"
    )
    results, server = run(Scripted(answer), calls=3)
    assert [r.body for r in results] == [b"hello world"] * 3  # type: ignore[attr-defined]
    assert server.connections == 1


def test_interim_answers_are_skipped_and_the_final_one_is_returned() -> None:
    answer = (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
        b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
    )
    (result,), _ = run(Scripted(answer))
    assert (result.status, result.body) == (201, b"ok")  # type: ignore[attr-defined]


def test_a_body_without_length_runs_to_the_close_and_the_next_call_opens_a_new_connection() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it"
    results, server = run(Scripted(answer, close_after=True), calls=2)
    assert [r.body for r in results] == [b"all of it"] * 2  # type: ignore[attr-defined]
    assert server.connections == 2


def test_both_content_length_and_chunked_is_read_as_chunked_and_the_connection_not_kept() -> None:
    """The pair is a request-smuggling signal (RFC 9112 6.3): chunked wins, no reuse."""
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
    )
    results, server = run(Scripted(answer), calls=2)
    assert [r.body for r in results] == [b"hi"] * 2  # type: ignore[attr-defined]
    assert server.connections == 2


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "upstream_invalid"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nx", "upstream_invalid"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "upstream_invalid"),
        (b"SPDY/3 200 OK\r\n\r\n", "upstream_invalid"),
        (b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n", "upstream_invalid"),
        (b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 70000 + b"\r\n\r\n", "upstream_invalid"),
        (b"", "upstream_invalid"),
    ],
    ids=["cut-body", "two-lengths", "bad-chunk", "not-http", "no-colon", "huge-head", "no-answer"],
)
def test_a_malformed_or_cut_answer_is_a_named_error_and_its_connection_is_dropped(
    answer: bytes, reason: str
) -> None:
    (result,), _ = run(Scripted(answer, close_after=True))
    assert isinstance(result, UpstreamError)
    assert result.reason == reason


def test_a_header_value_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    (result,), server = run(Scripted(ok), headers={"X-Note": "a\r\nX-Injected: 1"})
    assert isinstance(result, UpstreamError)
    assert result.reason == "upstream_invalid"
    assert server.requests == []


def test_head_and_204_answers_have_no_body_and_keep_the_connection() -> None:
    answer = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"
    results, server = run(Scripted(answer), calls=3)
    assert [(r.status, r.body) for r in results] == [(204, b"")] * 3  # type: ignore[attr-defined]
    assert server.connections == 1


def test_an_http_1_0_answer_is_not_kept_alive() -> None:
    answer = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"
    results, server = run(Scripted(answer), calls=2)
    assert [r.body for r in results] == [b"ok"] * 2  # type: ignore[attr-defined]
    assert server.connections == 2


async def _exchange(pool: Pool, port: int) -> bytes:
    conn = await pool.acquire(5)
    headers = [(b"Host", f"127.0.0.1:{port}".encode())]
    try:
        await conn.send("GET", b"/x", headers, b"")
        _, _, _, framing, length = await conn.receive(b"GET")
        body = Body(conn, framing, length, pool.release)
    except BaseException:
        conn.close()
        pool.release(conn)
        raise
    try:
        return b"".join([piece async for piece in body])
    finally:
        body.close()


def _pool(
    port: int, *, keep: int = 4, expiry_s: float = 3.0, max_open: int = 100, spare: list[int] | None = None
) -> Pool:
    return Pool(
        address="127.0.0.1",
        port=port,
        tls=None,
        sni="127.0.0.1",
        keep=keep,
        expiry_s=expiry_s,
        max_open=max_open,
        spare=[256] if spare is None else spare,
    )


def test_callers_beyond_the_open_limit_wait_for_a_connection_instead_of_opening_more() -> None:
    server = Scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async def main() -> list[bytes]:
        async with asyncio.timeout(20):
            listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
            port = listener.sockets[0].getsockname()[1]
            pool = _pool(port, max_open=2)
            try:
                return await asyncio.gather(*(_exchange(pool, port) for _ in range(12)))
            finally:
                pool.close()
                listener.close()

    assert asyncio.run(main()) == [b"ok"] * 12
    assert server.connections <= 2


def test_an_idle_connection_is_closed_once_it_has_been_idle_for_the_expiry() -> None:
    closed = asyncio.Event()

    class Watching(Scripted):
        async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await super().handle(reader, writer)
            closed.set()  # the client closed its end

    server = Watching(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async def main() -> tuple[bytes, bool]:
        async with asyncio.timeout(20):
            listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
            port = listener.sockets[0].getsockname()[1]
            pool = _pool(port, expiry_s=0.05)
            try:
                body = await _exchange(pool, port)
                await asyncio.wait_for(closed.wait(), 10)  # bounded: the sweep runs at 0.05 s
                return body, closed.is_set()
            finally:
                pool.close()
                listener.close()

    assert asyncio.run(main()) == (b"ok", True)


def test_no_more_idle_connections_are_kept_than_the_process_wide_spare_allows() -> None:
    server = Scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async def main() -> list[int]:
        async with asyncio.timeout(20):
            listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
            port = listener.sockets[0].getsockname()[1]
            spare = [3]
            pool = _pool(port, keep=64, spare=spare)
            try:
                await asyncio.gather(*(_exchange(pool, port) for _ in range(8)))
                left = spare[0]
                await asyncio.gather(*(_exchange(pool, port) for _ in range(8)))
                return [left, spare[0]]
            finally:
                pool.close()
                listener.close()

    assert asyncio.run(main()) == [0, 0]  # three kept (no more), then taken and kept again
    assert server.connections == 8 + 5  # the second eight: three reused, five opened anew
