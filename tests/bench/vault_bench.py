"""Vault and egress-guard figures (issue 5): seal/open per second, rotating 10,000 secrets,
and the time the SSRF guard adds to a call on loopback.

Run from the repo root: ``.venv/bin/python tests/bench/vault_bench.py``.

The guard figure compares, call by call (interleaved), ``Egress.send`` with the real
policy (URL check, resolution and address check, then the pinned connection) against the
same ``Egress`` with a policy that checks nothing: the difference is what the guard adds.
Both reuse connections per (hostname, checked address) as the transport does; a plain
httpx client (fresh and reused connection) is printed beside them for scale. The
guard's own CPU time per call is measured separately, since wall-clock percentiles on a
shared, loaded machine move by more than the guard costs.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance import config
from appliance.egress.guard import Address, EgressPolicy, Resolver, parse_address
from appliance.egress.transport import Egress
from appliance.gateway.runtime import Runtime
from appliance.vault import store
from appliance.vault.crypto import Sealer, context, new_key
from tests.support.vault_seed import seed_credentials

RESPONSE = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'


def seal_open(n: int = 100_000) -> None:
    sealer = Sealer(new_key(), 1)
    ctx = context("secrets", 42, "credential")
    plain = b'{"token":"' + b"x" * 40 + b'"}'
    started = time.perf_counter()
    blobs = [sealer.seal(plain, ctx) for _ in range(n)]
    sealed = time.perf_counter() - started
    started = time.perf_counter()
    for blob in blobs:
        sealer.open(blob, ctx)
    opened = time.perf_counter() - started
    print(f"seal: {n / sealed:,.0f} per second ({sealed / n * 1e6:.1f} µs each)")
    print(f"open: {n / opened:,.0f} per second ({opened / n * 1e6:.1f} µs each)")


def rotation(count: int = 10_000) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = config.load(env={"TOOLSPOKE_DATA_DIR": tmp})

        async def main() -> None:
            rt = Runtime(settings)
            await rt.open()
            try:
                await seed_credentials(rt, count)
                started = time.perf_counter()
                report = await store.rotate(rt.db, rt.vault, batch=500)
                took = time.perf_counter() - started
                assert report["resealed"] == count
                print(
                    f"rotate {count:,} secrets: {took:.2f} s ({count / took:,.0f} per second, batches of 500)"
                )
            finally:
                await rt.close()

        asyncio.run(main())


class FastServer:
    """A minimal keep-alive HTTP/1.1 server on its own thread and loop."""

    def __init__(self) -> None:
        self.port = 0
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                writer.write(RESPONSE)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.close()

    def __enter__(self) -> FastServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


class NoGuard(EgressPolicy):
    """Parses the URL (httpx would anyway) and connects to the literal address: no checks."""

    def check_url(self, url: str | httpx.URL, *, field: str = "url") -> httpx.URL:
        return url if isinstance(url, httpx.URL) else httpx.URL(url)

    async def resolve(self, host: str, port: int, resolver: Resolver | None = None) -> list[Address]:
        return [parse_address(host)]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def guard_cost(port: int, n: int = 2000) -> None:
    url = f"http://127.0.0.1:{port}/x"
    samples: dict[str, list[float]] = {k: [] for k in ("guarded", "unguarded", "plain", "reused")}
    fresh = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
    async with (
        Egress(EgressPolicy(("127.0.0.1/32",))) as guarded,
        Egress(NoGuard()) as unguarded,
        httpx.AsyncClient(transport=fresh, trust_env=False) as plain,
        httpx.AsyncClient(trust_env=False) as reused,
    ):

        async def one(kind: str) -> None:
            t = time.perf_counter()
            if kind in ("guarded", "unguarded"):
                await (guarded if kind == "guarded" else unguarded).send("GET", url)
            else:
                response = await (plain if kind == "plain" else reused).get(url)
                await response.aread()
            samples[kind].append((time.perf_counter() - t) * 1000)

        for _ in range(50):  # warm up
            for kind in samples:
                await one(kind)
        for values in samples.values():
            values.clear()
        order = list(samples)
        shuffle = random.Random(5).shuffle  # a fixed order would favour whoever goes first
        for _ in range(n):
            shuffle(order)
            for kind in order:
                await one(kind)
        policy = guarded.policy
        cpu = time.process_time()
        for _ in range(20 * n):
            await policy.resolve(policy.check_url(url).host, port)
        check_us = (time.process_time() - cpu) / (20 * n) * 1e6
    labels = {
        "guarded": "Egress.send, guard on",
        "unguarded": "Egress.send, guard off",
        "plain": "plain httpx, fresh connection",
        "reused": "plain httpx, reused connection",
    }
    for kind, values in samples.items():
        print(f"{labels[kind]:<44} p50 {statistics.median(values):.3f} ms  p99 {_pct(values, 0.99):.3f} ms")
    added = statistics.median(samples["guarded"]) - statistics.median(samples["unguarded"])
    print(f"guard's added time per call, p50 difference: {added:.3f} ms (target ≤ 0.5 ms)")
    print(f"guard's own CPU per call (check_url + resolve + address check, IP literal): {check_us:.1f} µs")
    connect = statistics.median(samples["plain"]) - statistics.median(samples["reused"])
    print(f"for scale: a fresh TCP connection costs {connect:.3f} ms p50 on loopback here")


if __name__ == "__main__":
    print("### vault")
    seal_open()
    rotation()
    print("\n### egress guard on loopback (ALLOWED_TOOL_CIDRS=127.0.0.1/32)")
    with FastServer() as server:
        asyncio.run(guard_cost(server.port))
