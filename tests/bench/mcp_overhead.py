"""Gateway overhead on tools/call to a fast local MCP upstream, in both protocol eras.

Run from the repo root: ``.venv/bin/python tests/bench/mcp_overhead.py [--slices N] [--think-ms T]``.

One upstream (``tests/support/upstream_server.py``, streamable HTTP, ``--stateless
--json-response``: no session, no SSE, as fast as the SDK serves) and one real appliance
(``toolspoke serve``) on loopback. The upstream is imported twice: ``up`` straight at the
upstream (the timed toolkit) and ``upc`` through a small counting HTTP proxy (a separate
process) that counts every request the gateway sends upstream by JSON-RPC method, so that
"no new upstream handshake per call" is a count, not a claim.

The client is the official SDK (``mcp.Client`` over ``streamable_http_client``), one client
per concurrent worker, each kept open across its calls; the tool is the upstream's ``add``:

- ``direct``: the upstream itself, tool ``add`` (the baseline);
- ``name``: the gateway's ``/mcp`` by exact name ``up__add``;
- ``bridge``: ``/mcp`` through the tool's runner (``describe_tools`` says which);
- ``slug``: ``/mcp/up``, the toolkit's own endpoint, under the upstream name ``add``;

each in the 2026-07-28 era (``mode="auto"``, checked to negotiate it without fallback) and
the 2025-11-25 era (``mode="legacy"``, initialize handshake).

The one-client overhead (the issue's target) is measured with one client per path open at
once, the paths taking turns in short slices (default 20 of 0.2 s each, the order rotating),
so that the machine's drift, which on a shared two-core box moves a path's p50 by a third
between seconds, falls on every path alike. It is taken twice:

- back to back: each client calls again as soon as it has its answer;
- paced: each client waits ``--think-ms`` (default 10 ms) after every answer, as an agent
  does between calls. Every process on the path has gone idle by the next call, so each
  call pays cold caches and a wake-up per process it crosses: the direct path crosses one
  (the upstream), the gateway path two more (the gateway, twice). Expect both p50s, and the
  overhead, to be higher than back to back.

Then 10 and 50 concurrent clients per path (calls/s, p50, p99), interleaved over rounds
(default 3); latency percentiles pool every round's samples, calls/s is the median of the
rounds.

Caveat on the SDK client: it re-lists tools after every call to a tool it has not seen in
``tools/list`` (to validate structured output). The bridge does not list ``up__add``, so the
``name`` path would pay a second round trip per call that is the client's, not the gateway's;
the bench seeds that client's schema cache with the upstream's ``add`` output schema so every
path validates the same way and a "call" is one tools/call round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.support.clients import modern_tools_call
from tests.support.peers import UPSTREAM, free_port, peer
from tests.support.servers import Appliance, cli, running_appliance

ERAS = {"auto": "2026-07-28", "legacy": "2025-11-25"}
PATHS = ("direct", "name", "bridge", "slug")
CONCURRENCY = (10, 50)  # one client: ``sliced``
HANDSHAKES = ("initialize", "server/discover")
ARGS = {"a": 2, "b": 3}
CALL_TIMEOUT_S = 30.0


# --- the counting proxy (runs as its own process: ``mcp_overhead.py --proxy LISTEN TARGET``) ---


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str], bytes] | None:
    """One HTTP/1.1 request: head bytes, lower-cased headers, body (by Content-Length)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise RuntimeError("chunked request bodies: not expected from httpx with a bytes body")
    length = int(headers.get("content-length") or 0)
    body = await reader.readexactly(length) if length else b""
    return head, headers, body


def _methods(headers: dict[str, str], body: bytes) -> list[str]:
    if "mcp-method" in headers:
        return [headers["mcp-method"]]
    try:
        message = json.loads(body)
    except ValueError:
        return []
    items = message if isinstance(message, list) else [message]
    return [str(m.get("method", "(reply)")) for m in items if isinstance(m, dict)]


async def _proxy_main(listen: int, target: int) -> None:
    counts: Counter[str] = Counter()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        upstream_w: asyncio.StreamWriter | None = None
        pipe: asyncio.Task[None] | None = None
        try:
            while True:
                request = await _read_request(client_r)
                if request is None:
                    return
                head, headers, body = request
                if head.startswith(b"GET /__counts "):
                    data = json.dumps(counts).encode()
                    client_w.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(data)}\r\n\r\n".encode()
                        + data
                    )
                    await client_w.drain()
                    continue
                if head.startswith(b"POST "):
                    counts["POST"] += 1
                    for method in _methods(headers, body):
                        counts[method] += 1
                if upstream_w is None:
                    counts["connections"] += 1
                    upstream_r, upstream_w = await asyncio.open_connection("127.0.0.1", target)
                    pipe = asyncio.create_task(_pipe(upstream_r, client_w))
                upstream_w.write(head + body)
                await upstream_w.drain()
        except (ConnectionError, asyncio.IncompleteReadError, RuntimeError) as exc:
            print(f"proxy: connection ended: {exc!r}", file=sys.stderr, flush=True)
        finally:
            if pipe is not None:
                pipe.cancel()
            for w in (upstream_w, client_w):
                if w is not None:
                    w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


def proxy_counts(port: int) -> Counter[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/__counts", timeout=10) as r:
        return Counter(json.loads(r.read()))


# --- the client side ---


@dataclass
class Target:
    path: str
    url: str
    headers: dict[str, str]
    tool: str
    arguments: dict[str, Any]
    seed: str | None = None  # a name the server does not list: seed the client's schema cache


@dataclass
class Sample:
    rounds: list[list[float]] = field(default_factory=list)  # latencies (s), one list per round
    rates: list[float] = field(default_factory=list)  # calls/s, one per round
    cpu: list[float] = field(default_factory=list)  # gateway CPU ms per call, one per round
    versions: set[str] = field(default_factory=set)

    @property
    def latencies(self) -> list[float]:
        return [x for r in self.rounds for x in r]


@asynccontextmanager
async def open_client(target: Target, mode: str, schema: dict[str, Any] | None) -> AsyncIterator[Client]:
    async with (
        create_mcp_http_client(headers=target.headers) as http,
        Client(
            streamable_http_client(target.url, http_client=http), mode=mode, read_timeout_seconds=60
        ) as client,
    ):
        if target.seed is not None:
            # Private, on purpose: see the module docstring (one tools/call per call on every path).
            client.session._tool_output_schemas[target.seed] = schema
        yield client


async def call(client: Client, target: Target) -> None:
    result = await asyncio.wait_for(client.call_tool(target.tool, target.arguments), CALL_TIMEOUT_S)
    if result.is_error:
        raise RuntimeError(f"{target.path}: {target.tool} failed: {result.content}")
    text = json.dumps(result.structured_content) + "".join(getattr(c, "text", "") for c in result.content)
    if "5" not in text:
        raise RuntimeError(f"{target.path}: unexpected answer {text[:200]}")


class Pool:
    """``size`` open SDK clients, each held by its own task (anyio scopes exit where they entered).

    Opening a client costs tens of milliseconds (an httpx client and its TLS context, then the
    handshake or ``server/discover``), so within one path-and-era block the pool grows from 10
    to 50 clients and is closed after (holding all 400 open at once slowed every path).
    """

    def __init__(self, target: Target, mode: str, schema: dict[str, Any] | None) -> None:
        self.target, self.mode, self.schema = target, mode, schema
        self.queues: list[asyncio.Queue[Any]] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.versions: set[str] = set()

    async def start(self, size: int) -> Pool:
        """Open clients until there are ``size`` (each warmed up with two calls)."""
        loop = asyncio.get_running_loop()
        ready = [loop.create_future() for _ in range(size - len(self.queues))]
        queues: list[asyncio.Queue[Any]] = [asyncio.Queue() for _ in ready]
        self.tasks += [asyncio.create_task(self._hold(q, r)) for q, r in zip(queues, ready, strict=True)]
        self.queues += queues
        self.versions |= set(await asyncio.wait_for(asyncio.gather(*ready), 120))
        return self

    async def _hold(self, queue: asyncio.Queue[Any], ready: asyncio.Future[str]) -> None:
        try:
            async with open_client(self.target, self.mode, self.schema) as client:
                for _ in range(2):
                    await call(client, self.target)
                ready.set_result(client.protocol_version)
                while (job := await queue.get()) is not None:
                    work, done = job
                    try:
                        done.set_result(await work(client))
                    except Exception as exc:
                        done.set_exception(exc)
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    async def run(self, clients: int, work: Any) -> list[Any]:
        """``work(client)`` on the first ``clients`` clients at once; their results."""
        loop = asyncio.get_running_loop()
        futures = []
        for queue in self.queues[:clients]:
            done = loop.create_future()
            queue.put_nowait((work, done))
            futures.append(done)
        return list(await asyncio.gather(*futures))

    async def close(self) -> None:
        for queue in self.queues:
            queue.put_nowait(None)
        await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), 60)


async def measure(
    pool: Pool, concurrency: int, seconds: float, think_s: float = 0.0
) -> tuple[list[float], float]:
    """``concurrency`` clients of the pool call for ``seconds``: every latency, and calls/s.
    With ``think_s``, each client waits that long after every answer (not timed)."""
    latencies: list[float] = []
    target = pool.target
    start = time.perf_counter()
    stop = start + seconds

    async def work(client: Client) -> int:
        done = 0
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            await call(client, target)
            latencies.append(time.perf_counter() - t0)
            done += 1
            if think_s:
                await asyncio.sleep(think_s)
        return done

    total = sum(await pool.run(concurrency, work))
    return latencies, total / (time.perf_counter() - start)


@dataclass
class Slices:
    """One client per path, the paths taking turns in short slices: latencies per slice."""

    slices: dict[tuple[str, str, bool], list[list[float]]] = field(default_factory=dict)
    versions: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def pooled(self, path: str, mode: str, paced: bool) -> list[float]:
        return [x for sl in self.slices[(path, mode, paced)] for x in sl]

    def overhead(self, path: str, mode: str, paced: bool, q: float = 0.5) -> float:
        return pct(self.pooled(path, mode, paced), q) - pct(self.pooled("direct", mode, paced), q)

    def blocks(self, path: str, mode: str, paced: bool, n: int = 4) -> str:
        """The p50 overhead in ``n`` consecutive stretches of the run: how steady it was."""
        gw, direct = self.slices[(path, mode, paced)], self.slices[("direct", mode, paced)]
        size = max(1, len(gw) // n)
        out = []
        for i in range(0, len(gw) - size + 1, size):
            g = [x for sl in gw[i : i + size] for x in sl]
            d = [x for sl in direct[i : i + size] for x in sl]
            out.append(f"{pct(g, 0.5) - pct(d, 0.5):+.2f}")
        return ", ".join(out)


def rotated(i: int) -> tuple[str, ...]:
    k = i % len(PATHS)
    return PATHS[k:] + PATHS[:k]


async def sliced(
    kits: dict[str, Target], schema: dict[str, Any] | None, count: int, slice_s: float, think_s: float
) -> Slices:
    """The one-client figures: per era, one SDK client per path open at once; ``count``
    slices back to back, then ``count`` paced ones (twice as long: fewer calls fit)."""
    out = Slices()
    for mode in ERAS:
        pools = {path: Pool(kits[path], mode, schema) for path in PATHS}
        try:
            for pool in pools.values():
                await pool.start(1)
            for paced, think, length in ((False, 0.0, slice_s), (True, think_s, 2 * slice_s)):
                for i in range(count):
                    for path in rotated(i):
                        latencies, _ = await measure(pools[path], 1, length, think)
                        out.slices.setdefault((path, mode, paced), []).append(latencies)
            for path, pool in pools.items():
                out.versions[(path, mode)] = pool.versions
        finally:
            for pool in pools.values():
                await pool.close()
        print(f"one-client slices, {ERAS[mode]}: done", file=sys.stderr, flush=True)
    return out


async def runner_of(app: Appliance, tool: str) -> str:
    target = Target("bridge", app.mcp_url, auth(app), "describe_tools", {"names": [tool]})
    async with open_client(target, "auto", None) as client:
        result = await client.call_tool("describe_tools", {"names": [tool]})
    described = result.structured_content or {}
    tools = described.get("tools") or []
    if result.is_error or not tools:
        raise RuntimeError(f"describe_tools({tool}) failed: {result.content}")
    print(f"`{tool}`: kind {tools[0]['kind']}, runner `{tools[0]['runner']}`", flush=True)
    return str(tools[0]["runner"])


async def output_schema(url: str) -> dict[str, Any] | None:
    target = Target("direct", url, {}, "add", ARGS)
    async with open_client(target, "auto", None) as client:
        listed = await client.list_tools()
    return next(t.output_schema for t in listed.tools if t.name == "add")


def auth(app: Appliance) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.key}"}


def _wire_request(target: Target) -> bytes:
    headers, body = modern_tools_call("-", target.tool, target.arguments)
    headers = {k: v for k, v in headers.items() if k != "Authorization"} | target.headers
    url = urllib.parse.urlsplit(target.url)
    payload = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (
        f"POST {url.path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
        f"{head}Content-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload


async def _wire_call(
    path: str, request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> float:
    t0 = time.perf_counter()
    writer.write(request)
    answer_head = await reader.readuntil(b"\r\n\r\n")
    length = int(answer_head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
    answer = json.loads(await reader.readexactly(length))
    elapsed = time.perf_counter() - t0
    if not answer_head.startswith(b"HTTP/1.1 200") or answer["result"].get("isError"):
        raise RuntimeError(f"{path}: {answer}")
    return elapsed


async def wire_phase(kits: dict[str, Target], count: int, slice_s: float, think_s: float) -> Slices:
    """One light client (the 2026-07-28 request's bytes prebuilt, the answer framed by its
    Content-Length) per path, in slices like ``sliced``: what the gateway adds, without the
    SDK client's own per-call cost (1.5 ms of CPU here) sharing the two cores."""
    out = Slices()
    mode = "auto"
    conns = {}
    try:
        for path in PATHS:
            url = urllib.parse.urlsplit(kits[path].url)
            reader, writer = await asyncio.open_connection(url.hostname, url.port)
            conns[path] = (_wire_request(kits[path]), reader, writer)
            await _wire_call(path, *conns[path])  # the first call warms the connection
        for paced, think, length in ((False, 0.0, slice_s), (True, think_s, 2 * slice_s)):
            for i in range(count):
                for path in rotated(i):
                    latencies: list[float] = []
                    stop = time.perf_counter() + length
                    while time.perf_counter() < stop:
                        latencies.append(await _wire_call(path, *conns[path]))
                        if think:
                            await asyncio.sleep(think)
                    out.slices.setdefault((path, mode, paced), []).append(latencies)
    finally:
        for _, _, writer in conns.values():
            writer.close()
    return out


def slices_report(title: str, s: Slices, modes: tuple[str, ...], think_s: float) -> None:
    print(f"\n{title}\n")
    print(
        "| era | path | calls | p50 | overhead p50 | overhead p99 | p50 overhead by quarter of the run "
        f"| paced ({think_s * 1000:g} ms think): calls | p50 | overhead p50 | overhead p99 | by quarter |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for mode in modes:
        for path in PATHS:
            cells = []
            for paced in (False, True):
                pooled = s.pooled(path, mode, paced)
                if path == "direct":
                    cells.append(f"{len(pooled)} | {pct(pooled, 0.5):.2f} | — | — | —")
                else:
                    cells.append(
                        f"{len(pooled)} | {pct(pooled, 0.5):.2f} | {s.overhead(path, mode, paced):+.2f} | "
                        f"{s.overhead(path, mode, paced, 0.99):+.2f} | {s.blocks(path, mode, paced)}"
                    )
            print(f"| {ERAS[mode]} | {path} | {cells[0]} | {cells[1]} |")


def targets(app: Appliance, upstream_url: str, slug: str, runner: str) -> dict[str, Target]:
    return {
        "direct": Target("direct", upstream_url, {}, "add", ARGS),
        "name": Target("name", app.mcp_url, auth(app), f"{slug}__add", ARGS, seed=f"{slug}__add"),
        "bridge": Target("bridge", app.mcp_url, auth(app), runner, {"tool": f"{slug}__add", "input": ARGS}),
        "slug": Target("slug", f"{app.base_url}/mcp/{slug}", auth(app), "add", ARGS),
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def timed(
    kits: dict[str, Target],
    rounds: int,
    seconds: float,
    schema: dict[str, Any] | None,
    pid: int,
    concurrencies: tuple[int, ...] = CONCURRENCY,
) -> dict[tuple[str, str, int], Sample]:
    """Every path, era and client count, interleaved over ``rounds``.

    Besides latency, the gateway's own CPU time per call (its process's user + system time
    over the block, over the calls made): on a machine shared with other work, latency
    moves with everyone's load, CPU per call much less.
    """
    samples: dict[tuple[str, str, int], Sample] = {}
    for r in range(rounds):
        t0 = time.perf_counter()
        for mode in ERAS:
            for path in PATHS:
                pool = Pool(kits[path], mode, schema)
                try:
                    for concurrency in concurrencies:
                        await pool.start(concurrency)  # c=10 runs with ten clients open, c=50 with fifty
                        cpu_before = cpu_seconds(pid)
                        latencies, rate = await measure(pool, concurrency, seconds)
                        cpu_ms = (cpu_seconds(pid) - cpu_before) * 1000 / max(1, len(latencies))
                        sample = samples.setdefault((path, mode, concurrency), Sample())
                        sample.rounds.append(latencies)
                        sample.rates.append(rate)
                        sample.cpu.append(cpu_ms)
                        sample.versions |= pool.versions
                finally:
                    await pool.close()
        print(f"round {r + 1}/{rounds}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return samples


async def handshake_phase(kits: dict[str, Target], proxy_port: int, calls_each: int) -> list[str]:
    """Calls through the counted toolkit ``upc`` on every gateway path and era: what went upstream.

    Per path and era: 10 clients open and make 2 warm-up calls each (the first call ever opens
    the gateway's pooled upstream session), then ``calls_each`` calls, counted on their own.
    """
    rows = []
    each = max(1, calls_each // 10)
    for mode in ERAS:
        for path in ("name", "bridge", "slug"):
            before_warm = proxy_counts(proxy_port)
            pool = await Pool(kits[path], mode, None).start(10)  # 2 warm-up calls per client
            try:
                before = proxy_counts(proxy_port)

                async def work(client: Client, target: Target = kits[path]) -> None:
                    for _ in range(each):
                        await call(client, target)

                await pool.run(10, work)
                delta = proxy_counts(proxy_port) - before
            finally:
                await pool.close()
            warm_delta = before - before_warm
            calls = each * 10
            shakes = sum(delta[m] for m in HANDSHAKES)
            rows.append(
                f"| {path} | {ERAS[mode]} | {sum(warm_delta[m] for m in HANDSHAKES)} | {calls} | "
                f"{delta['tools/call']} | {delta['POST']} | {delta['connections']} | {shakes} | "
                f"{shakes * 1000 / calls:.1f} |"
            )
    return rows


def import_mcp(app: Appliance, url: str, slug: str) -> None:
    done = cli(
        app.data_dir,
        "import",
        "mcp",
        url,
        "--slug",
        slug,
        "--json",
        env={"ALLOWED_TOOL_CIDRS": "127.0.0.1/32"},
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"import {slug} failed: {done.stderr[-1000:]}")
    report = json.loads(done.stdout)
    if f"{slug}__add" not in {t["name"] for t in report["tools"]}:
        raise RuntimeError(f"import {slug}: no {slug}__add in {report['tools']}")


def report(samples: dict[tuple[str, str, int], Sample], rounds: int) -> None:
    print(f"\nLatency per call (ms), pooled over {rounds} rounds; overhead = gateway p50 minus direct p50.\n")
    print(
        "| era | clients | path | negotiated | calls | p50 | p99 | overhead p50 | calls/s (median) "
        "| gateway CPU ms/call (median) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode, era in ERAS.items():
        for concurrency in sorted({c for (_, _, c) in samples}):
            base = pct(samples[("direct", mode, concurrency)].latencies, 0.5)
            for path in PATHS:
                s = samples[(path, mode, concurrency)]
                p50 = pct(s.latencies, 0.5)
                negotiated = ", ".join(sorted(s.versions))
                over = "—" if path == "direct" else f"{p50 - base:+.2f}"
                cpu = "—" if path == "direct" else f"{statistics.median(s.cpu):.2f}"
                print(
                    f"| {era} | {concurrency} | {path} | {negotiated} | {len(s.latencies)} | "
                    f"{p50:.2f} | {pct(s.latencies, 0.99):.2f} | {over} | {statistics.median(s.rates):.0f} "
                    f"| {cpu} |"
                )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.8, help="timed seconds per concurrent block")
    parser.add_argument("--slices", type=int, default=20, help="one-client slices per path, era and pacing")
    parser.add_argument(
        "--slice-seconds", type=float, default=0.2, help="one back-to-back slice (paced: twice)"
    )
    parser.add_argument("--think-ms", type=float, default=10.0, help="paced clients' wait after each answer")
    parser.add_argument(
        "--clients", type=int, nargs="+", default=list(CONCURRENCY), help="concurrent clients to time"
    )
    parser.add_argument("--handshake-calls", type=int, default=200, help="calls per path and era")
    parser.add_argument("--proxy", nargs=2, type=int, metavar=("LISTEN", "TARGET"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.proxy:
        asyncio.run(_proxy_main(*args.proxy))
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        port, proxy_port = free_port(), free_port()
        upstream = [sys.executable, str(UPSTREAM), "--transport", "streamable-http", "--port", str(port)]
        proxy = [sys.executable, str(Path(__file__).resolve()), "--proxy", str(proxy_port), str(port)]
        env = {
            "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
            "TOOLSPOKE_MCP_RESYNC_S": "0",
            # The bench measures the call path, not the limits: one agent makes thousands of calls.
            "TOOLSPOKE_RATE_LIMIT": "100000000",
            "TOOLSPOKE_BROWSE_RATE_LIMIT": "100000000",
        }
        with (
            peer([*upstream, "--stateless", "--json-response"], port, logs / "upstream.log"),
            peer(proxy, proxy_port, logs / "proxy.log"),
            running_appliance(logs / "data", env=env) as app,
        ):
            upstream_url = f"http://127.0.0.1:{port}/mcp"
            import_mcp(app, upstream_url, "up")
            import_mcp(app, f"http://127.0.0.1:{proxy_port}/mcp", "upc")
            runner = asyncio.run(runner_of(app, "up__add"))
            schema = asyncio.run(output_schema(upstream_url))
            kits = targets(app, upstream_url, "up", runner)
            think_s = args.think_ms / 1000
            one = asyncio.run(sliced(kits, schema, args.slices, args.slice_seconds, think_s))
            samples = asyncio.run(
                timed(kits, args.rounds, args.seconds, schema, app.proc.pid, tuple(args.clients))
            )
            wire = asyncio.run(wire_phase(kits, args.slices, args.slice_seconds, think_s))
            counted = targets(app, upstream_url, "upc", runner)
            at_import = proxy_counts(proxy_port)
            rows = asyncio.run(handshake_phase(counted, proxy_port, args.handshake_calls))
            total = proxy_counts(proxy_port)
    print("\nOne client per path, the paths taking turns in short slices (ms; overhead = gateway minus")
    print("direct, same pacing; the target: p50 overhead ≤ 2 ms). Negotiated:", end=" ")
    print("; ".join(f"{p} {ERAS[m]}: {', '.join(sorted(v))}" for (p, m), v in sorted(one.versions.items())))
    slices_report("Official SDK client:", one, tuple(ERAS), think_s)
    slices_report(
        "Light client, 2026-07-28 (prebuilt request bytes on a kept-alive socket):", wire, ("auto",), think_s
    )
    report(samples, args.rounds)
    print("\nUpstream requests seen by the counting proxy in front of toolkit `upc` (handshakes =")
    print("`initialize` + `server/discover`; counted calls come from 10 concurrent SDK clients):\n")
    print(
        "| path | client era | handshakes in the 20 warm-up calls | counted calls | upstream tools/call | "
        "upstream POSTs | new upstream TCP connections | handshakes | per 1,000 calls |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    first = {m: at_import[m] for m in sorted(at_import) if m != "POST"}
    print(f"\nBy the CLI import of `upc` (its own client, not the gateway's pool): {first or 'nothing'}.")
    print(f"Whole run through the proxy: { {m: total[m] for m in sorted(total)} }.")
    print(f"\nWall time {time.perf_counter() - started:.0f} s on {os.cpu_count()} CPUs.")


if __name__ == "__main__":
    main()
