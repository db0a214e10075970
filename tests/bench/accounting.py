"""Spend and accounting: what it adds to a call, and calls/s through the full path.

Run from the repo root: ``.venv/bin/python tests/bench/accounting.py [--calls N]``.

1. **Accounting alone, in process** (real database, real book and limiter, no HTTP): per
   call the rate limit, price, quota and credit check and the reservation ("decide"), then
   the audit row and charge until durable ("acknowledge"), 1 caller and 50 concurrent ones.
2. **The full path**: a real appliance, a real HTTP upstream on loopback (a minimal asyncio
   server in its own process: kept-alive connections, no thread per connection), paid calls
   from non-owner keys to a toolkit with a fee and a ceiling: rate → quota → reserve →
   upstream → charge → audit. 1 client calling in a loop, then 50 clients at once; each with
   three clients, from lightest to heaviest on the CPU that they share with the gateway on
   this machine: ``wire`` (the same stateless 2026-07-28 POST bytes written on a kept-alive
   socket and the answer framed by its Content-Length, as a load generator such as wrk
   does), ``raw`` (one POST per call over httpx) and the official SDK client.

Prints a table; not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance.db import Database
from appliance.db.migrate import default_migrations_dir
from appliance.ledger import store
from appliance.ledger.book import Book
from appliance.ledger.ratelimit import RateLimiter
from tests.support.accounts import MeteredUpstream, add_user_keys, admin, credits_path, install
from tests.support.clients import connect, modern_tools_call
from tests.support.servers import Appliance, running_appliance

UPSTREAM = """
import asyncio, sys

class Hit(asyncio.Protocol):
    # GET /hit on a kept-alive HTTP/1.1 connection: the fastest honest upstream we can run
    # on loopback, so that the figures are the gateway's and not the upstream's.
    count = 0

    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""

    def data_received(self, data):
        self.buffer += data
        while b"\\r\\n\\r\\n" in self.buffer:
            _, self.buffer = self.buffer.split(b"\\r\\n\\r\\n", 1)
            Hit.count += 1
            body = b'{"n": %d}' % Hit.count
            self.transport.write(
                b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\nContent-Length: %d\\r\\n\\r\\n%s"
                % (len(body), body)
            )

async def main():
    server = await asyncio.get_running_loop().create_server(Hit, "127.0.0.1", int(sys.argv[1]), backlog=512)
    await server.serve_forever()

asyncio.run(main())
"""


class Upstream(MeteredUpstream):
    """A minimal asyncio HTTP/1.1 server answering ``GET /hit`` in its own process (kept-alive
    connections, no thread per connection), so the bench's clients do not share a GIL with
    it and the upstream is never the bottleneck."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([sys.executable, "-c", UPSTREAM, str(self.port)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000


async def accounting_alone(calls: int, workers: int, synchronous: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(Path(tmp) / "b.db", synchronous=synchronous)
        await db.open(default_migrations_dir())
        async with db.write() as tx:
            await tx.run("INSERT INTO toolkits (project_id, slug, source_kind) VALUES (1, 'kit', 'openapi')")
            await tx.run("INSERT INTO users (name) VALUES ('payer')")
        book = Book(db, default_fee=1000)
        limiter = RateLimiter(10**9, 60.0)
        await book.admin(lambda r: store.upsert_price(r, 0.0, 1, 1000, 10**9, 0, "calls"))
        await book.admin(lambda r: store.insert_grant(r, 0.0, 1, 10**12, "bench", ""))
        decide: list[float] = []
        ack: list[float] = []

        async def worker(n: int) -> None:
            for _ in range(n):
                t0 = time.perf_counter()
                limiter.take("key:bench")
                await book.price(1, toolkit="kit")
                res = await book.reserve(1, 1, toolkit="kit")
                t1 = time.perf_counter()
                row = store.AuditRow(time.time(), 1, "payer", None, None, "tsk_bench", 1, "kit", "default",
                                     "kit__a", None, "ok", None, 1.0, 10, 0, False)  # fmt: skip
                await book.record(row, res)
                t2 = time.perf_counter()
                decide.append(t1 - t0)
                ack.append(t2 - t1)

        started = time.perf_counter()
        await asyncio.gather(*(worker(calls // workers) for _ in range(workers)))
        elapsed = time.perf_counter() - started
        await book.aclose()
        await db.close()
    return {
        "calls/s": len(ack) / elapsed,
        "decide p50 ms": pct(decide, 0.5),
        "ack p50 ms": pct(ack, 0.5),
        "ack p95 ms": pct(ack, 0.95),
    }


async def full_path(
    app: Appliance, keys: list[str], tool: str, calls: int, clients: int, *, kind: str
) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0

    async def wire(key: str, n: int) -> None:
        """The request's bytes, built once, on one kept-alive socket; the answer read by its
        Content-Length and checked for a result that is not an error."""
        nonlocal errors
        headers, body = modern_tools_call(key, tool)
        payload = json.dumps(body).encode()
        host, port = app.base_url.removeprefix("http://").split(":")
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        request = (
            f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"{head}Content-Length: {len(payload)}\r\n\r\n"
        ).encode() + payload
        reader, writer = await asyncio.open_connection(host, int(port))

        async def once() -> bool:
            writer.write(request)
            answer_head = await reader.readuntil(b"\r\n\r\n")
            length = int(answer_head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            answer = await reader.readexactly(length)
            return answer_head.startswith(b"HTTP/1.1 200") and b'"isError":false' in answer

        try:
            await once()  # warm: the connection
            for _ in range(n):
                t0 = time.perf_counter()
                ok = await once()
                latencies.append(time.perf_counter() - t0)
                errors += not ok
        finally:
            writer.close()

    async def raw(key: str, n: int) -> None:
        """A stateless 2026-07-28 tools/call per POST over one kept-alive httpx connection: a
        client that costs far less CPU than the SDK's, which shares these two cores."""
        nonlocal errors
        headers, body = modern_tools_call(key, tool)
        async with httpx.AsyncClient(base_url=app.base_url, headers=headers, timeout=60) as http:
            await http.post("/mcp", json=body)  # warm: the connection
            for _ in range(n):
                t0 = time.perf_counter()
                r = await http.post("/mcp", json=body)
                latencies.append(time.perf_counter() - t0)
                errors += r.status_code != 200 or bool(r.json().get("result", {}).get("isError", True))

    async def client(key: str, n: int) -> None:
        nonlocal errors
        if kind == "wire":
            return await wire(key, n)
        if kind == "raw":
            return await raw(key, n)
        async with connect(dataclasses.replace(app, key=key)) as c:
            # The SDK re-lists tools after each call to a tool tools/list does not show (the
            # bridge lists only itself); seed its cache so a call is one round trip, as in
            # mcp_overhead.py. Private on purpose.
            c.session._tool_output_schemas[tool] = None
            await c.call_tool(tool, {})  # warm: the session
            for _ in range(n):
                t0 = time.perf_counter()
                result = await c.call_tool(tool, {})
                latencies.append(time.perf_counter() - t0)
                errors += bool(result.is_error)

    per = max(1, calls // clients)
    before = server_times(app)
    cpu_before = (process_cpu_s(app.proc.pid), time.process_time())
    started = time.perf_counter()
    await asyncio.gather(*(client(keys[i % len(keys)], per) for i in range(clients)))
    elapsed = time.perf_counter() - started
    cpu_after = (process_cpu_s(app.proc.pid), time.process_time())
    after = server_times(app)
    n = after["count"] - before["count"]
    made = max(1, len(latencies))
    return {
        "calls/s": len(latencies) / elapsed,
        # CPU per call of the gateway process and of this one (the clients): on two shared
        # cores, a heavy client caps the rate before the gateway does.
        "gateway CPU ms/call": (cpu_after[0] - cpu_before[0]) * 1000 / made,
        "client CPU ms/call": (cpu_after[1] - cpu_before[1]) * 1000 / made,
        "p50 ms": pct(latencies, 0.5),
        "p95 ms": pct(latencies, 0.95),
        "errors": errors,
        # inside the server: the whole call (accounting included) and the upstream's part
        "server mean ms": (after["call"] - before["call"]) / n * 1000,
        "upstream mean ms": (after["upstream"] - before["upstream"]) / n * 1000,
    }


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_times(app: Appliance) -> dict[str, float]:
    """Sums of the server's own call and upstream histograms for the meter toolkit."""
    text = httpx.get(app.base_url + "/metrics", timeout=30).text
    out = {"count": 0.0, "call": 0.0, "upstream": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("toolkit") != "meter":
                continue
            if sample.name == "toolspoke_tool_call_seconds_count":
                out["count"] = sample.value
            elif sample.name == "toolspoke_tool_call_seconds_sum":
                out["call"] = sample.value
            elif sample.name == "toolspoke_upstream_seconds_sum":
                out["upstream"] = sample.value
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1000)
    modes, kinds = ["FULL", "NORMAL"], ["wire", "raw", "SDK"]
    parser.add_argument("--synchronous", nargs="+", default=modes, choices=modes)
    parser.add_argument("--clients", nargs="+", default=kinds, choices=kinds, help="client kinds")
    args = parser.parse_args()
    print("accounting alone (in process: limit, price, quota, credit, reserve = decide; audit + charge")
    print("group-committed until durable = ack):")
    for synchronous in args.synchronous:
        for workers in (1, 50):
            figures = asyncio.run(accounting_alone(args.calls, workers, synchronous))
            shown = ", ".join(f"{k} {v:,.2f}" for k, v in figures.items())
            print(f"  synchronous={synchronous:<6} {workers:>3} callers: {shown}")
    upstream = Upstream()
    env = {
        "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
        "TOOLSPOKE_IMPORTS_PER_HOUR": "1000",
        "TOOLSPOKE_RATE_LIMIT": "1000000",
        "TOOLSPOKE_LOG_LEVEL": "WARNING",
    }
    print(
        "full path (client → appliance → asyncio HTTP upstream in its own process; paid non-owner calls;"
        " wire = prebuilt POST bytes on a socket, raw = one POST per call over httpx, SDK = the"
        " official client):"
    )
    try:
        for synchronous in args.synchronous:
            env["TOOLSPOKE_DB_SYNCHRONOUS"] = synchronous
            with tempfile.TemporaryDirectory() as tmp, running_appliance(Path(tmp) / "data", env=env) as app:
                keys = add_user_keys(app.data_dir, "bench", 50)
                admin(app, "POST", credits_path(app, "bench"), {"amount": 10**9})
                tool = install(app, "meter", upstream, fee=1, daily_limit=10**9)  # type: ignore[arg-type]
                for kind in args.clients:
                    for clients in (1, 50):
                        figures: Any = asyncio.run(full_path(app, keys, tool, args.calls, clients, kind=kind))
                        shown = ", ".join(f"{k} {v:,.2f}" for k, v in figures.items())
                        print(f"  synchronous={synchronous:<6} {kind:<4} {clients:>3} clients: {shown}")
    finally:
        upstream.close()


if __name__ == "__main__":
    main()
