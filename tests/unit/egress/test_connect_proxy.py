"""The sandboxed servers' CONNECT proxy: the allow-list AND the guard, pinned, bounded, logged.

Real sockets throughout: the proxy listens on a unix socket as in production, the upstream
is a TCP echo server on loopback (opened to the guard by ALLOWED_TOOL_CIDRS, or not), and
names are resolved by an injected resolver that counts its calls.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from appliance.egress.connect_proxy import ConnectProxy, HostPattern, parse_pattern, parse_patterns
from appliance.egress.guard import EgressPolicy
from appliance.errors import ImportFailed


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=20))  # type: ignore[arg-type]


class Resolver:
    """Answers every name with the current address; counts the questions."""

    def __init__(self, address: str = "127.0.0.1") -> None:
        self.address = address
        self.calls = 0

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls += 1
        return [self.address]


@asynccontextmanager
async def echo_server() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A TCP server on 127.0.0.1 that echoes, and keeps every first chunk it was sent."""
    seen: list[bytes] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            seen.append(data)
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], seen
    finally:
        server.close()


@asynccontextmanager
async def proxy_for(
    hosts: list[str],
    *,
    cidrs: tuple[str, ...] = ("127.0.0.1/32",),
    resolver: Resolver | None = None,
    **kw: Any,
) -> AsyncIterator[Path]:
    policy = EgressPolicy(cidrs, resolver=resolver or Resolver())
    with tempfile.TemporaryDirectory(prefix="px") as folder:
        handle = await ConnectProxy(policy, **kw).serve("p.kit", hosts, Path(folder) / "e.sock")
        try:
            yield handle.path
        finally:
            await handle.aclose()
        assert not handle.path.exists()  # the socket goes with the proxy


async def ask(path: Path, head: bytes) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(head)
    await writer.drain()
    answer = await reader.readuntil(b"\r\n\r\n")
    return answer, reader, writer


def connect_line(authority: str) -> bytes:
    return f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode()


def test_an_allowed_host_that_the_guard_admits_is_tunnelled_to_the_checked_address() -> None:
    async def scenario() -> None:
        resolver = Resolver()
        async with echo_server() as (port, seen), proxy_for([f"api.test:{port}"], resolver=resolver) as path:
            answer, reader, writer = await ask(path, connect_line(f"api.test:{port}"))
            assert answer.startswith(b"HTTP/1.1 200 ")
            resolver.address = "10.9.9.9"  # a rebinding answer now: never asked again
            writer.write(b"hello through the tunnel")
            await writer.drain()
            assert await reader.readexactly(24) == b"hello through the tunnel"
            writer.close()
            assert resolver.calls == 1
            assert seen[0] == b"hello through the tunnel"  # the head never reaches the upstream

    run(scenario())


@pytest.mark.parametrize(
    ("allowed", "asked", "cidrs", "status", "why"),
    [
        (["api.test"], "other.test:443", ("127.0.0.1/32",), b"403", "not in the toolkit's allowed hosts"),
        (["api.test"], "api.test:8443", ("127.0.0.1/32",), b"403", "not in the toolkit's allowed hosts"),
        (["*.test"], "test:443", ("127.0.0.1/32",), b"403", "not in the toolkit's allowed hosts"),
        (["api.test"], "api.test:443", (), b"403", "loopback"),  # allowed, but the guard refuses
        (["127.0.0.1"], "127.0.0.1:443", (), b"403", "loopback"),
        (["localhost"], "localhost:443", (), b"403", "loopback"),
    ],
)
def test_a_connect_needs_the_allow_list_and_the_guard_and_each_refusal_is_logged(
    allowed: list[str], asked: str, cidrs: tuple[str, ...], status: bytes, why: str, caplog: Any
) -> None:
    async def scenario() -> bytes:
        async with proxy_for(allowed, cidrs=cidrs) as path:
            answer, _, writer = await ask(path, connect_line(asked) + b"secret payload")
            writer.close()
            return answer

    with caplog.at_level(logging.WARNING, logger="appliance.egress.connect_proxy"):
        answer = run(scenario())
    assert answer.split(b" ")[1] == status
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert why in logged and asked.rsplit(":", 1)[0] in logged and "p.kit" in logged
    assert "secret payload" not in logged


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n", b"405"),
        (b"CONNECT api.test HTTP/1.1\r\n\r\n", b"405"),  # no port
        (b"CONNECT *.test:443 HTTP/1.1\r\n\r\n", b"405"),
        (b"CONNECT api.test:443\r\n\r\n", b"405"),
        (b"CONNECT api.test:99999 HTTP/1.1\r\n\r\n", b"405"),
        (b"CONNECT \xff\xfe:443 HTTP/1.1\r\n\r\n", b"405"),
        (b"CONNECT api.test:443 HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n", b"400"),  # over the bound
    ],
)
def test_anything_but_a_well_formed_connect_within_the_size_bound_is_refused(
    head: bytes, status: bytes
) -> None:
    async def scenario() -> bytes:
        async with proxy_for(["api.test", "*.test"]) as path:
            answer, _, writer = await ask(path, head)
            writer.close()
            return answer

    assert run(scenario()).split(b" ")[1] == status


def test_connections_are_bounded_per_server_and_an_idle_tunnel_is_closed() -> None:
    async def scenario() -> None:
        async with (
            echo_server() as (port, _),
            proxy_for([f"api.test:{port}"], max_connections=1, idle_s=0.3) as path,
        ):
            first, reader, writer = await ask(path, connect_line(f"api.test:{port}"))
            assert first.startswith(b"HTTP/1.1 200 ")
            second, _, other = await ask(path, connect_line(f"api.test:{port}"))
            assert second.split(b" ")[1] == b"503"
            other.close()
            # Nothing sent either way: the tunnel closes after idle_s (EOF, bounded by run's timeout).
            assert await reader.read() == b""
            writer.close()
            third, _, writer = await ask(path, connect_line(f"api.test:{port}"))
            assert third.startswith(b"HTTP/1.1 200 ")  # the slot was given back
            writer.close()

    run(scenario())


def test_with_an_upstream_proxy_the_tunnel_is_asked_for_the_checked_address() -> None:
    asked: list[bytes] = []

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked.append((await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")[0])
        writer.write(b"HTTP/1.1 200 OK\r\n\r\n")
        await writer.drain()
        writer.write(await reader.read(100))  # one echo
        await writer.drain()
        writer.close()

    async def scenario() -> None:
        server = await asyncio.start_server(upstream, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with proxy_for(
            ["pypi.org"], cidrs=(), resolver=Resolver("151.101.0.223"), upstream=url
        ) as path:
            answer, reader, writer = await ask(path, connect_line("pypi.org:443"))
            assert answer.startswith(b"HTTP/1.1 200 ")
            writer.write(b"ping")
            assert await reader.readexactly(4) == b"ping"
            writer.close()
        server.close()

    run(scenario())
    assert asked == [b"CONNECT 151.101.0.223:443 HTTP/1.1"]


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("Registry.NPMjs.org", HostPattern("registry.npmjs.org", 443)),
        ("api.example.com:8443", HostPattern("api.example.com", 8443)),
        ("*.example.com", HostPattern("*.example.com", 443)),
        ("203.0.113.7:80", HostPattern("203.0.113.7", 80)),
        ("[2001:db8::1]:443", HostPattern("2001:db8::1", 443)),
        ("example.com.", HostPattern("example.com", 443)),
    ],
)
def test_host_patterns_are_normalised(text: str, pattern: HostPattern) -> None:
    assert parse_pattern(text) == pattern


@pytest.mark.parametrize(
    "text",
    ["", "*", "*.", "a..b", "api.test:0", "api.test:65536", "a b", "http://x", "x:y", "-a.test", "*.*.x"],
)
def test_a_malformed_pattern_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(ImportFailed) as caught:
        parse_pattern(text)
    assert caught.value.field == "allow_hosts"


def test_a_wildcard_matches_subdomains_only_and_patterns_are_bounded_and_deduplicated() -> None:
    wild = parse_pattern("*.example.com")
    assert wild.matches("a.example.com", 443) and wild.matches("a.b.example.com", 443)
    assert not wild.matches("example.com", 443) and not wild.matches("badexample.com", 443)
    assert not wild.matches("a.example.com", 80)
    assert parse_patterns(["x.test", "X.test:443"]) == (HostPattern("x.test", 443),)
    with pytest.raises(ImportFailed):
        parse_patterns([f"h{i}.test" for i in range(65)])
