"""The stdio sandbox's cost: cold start inside and outside it, and memory per sandboxed server.

Run from the repo root: ``.venv/bin/python tests/bench/sandbox.py [--runs N]``.

Each run starts a server through ``StdioProcess`` (the gateway's own supervisor), writes
``initialize`` and times until the answer: the cold start an agent's first call waits for.
Two servers: ``tests/support/hostile_stdio.py`` (Python, standard library only) and the npm
``server-memory`` (node). Memory: with the server answering, the resident and proportional
set sizes of its whole process tree (for the sandbox: the outer bwrap, bwrap's pid 1 and the
server), from ``/proc``; the overhead is the difference from the same server unsandboxed.
A third mode gives the server an allowed host: the egress proxy and the forwarder (a python
process in the sandbox) come with it. Prints a markdown table; median and 90th percentile
over the runs. Last, the proxy's connect overhead: a TCP connect plus one echoed line to a
loopback server, directly and as a ``CONNECT`` through the proxy's unix socket.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance.children.processes import StdioPolicy, StdioProcess, StdioSpec
from appliance.children.sandbox import probe
from appliance.egress.connect_proxy import ConnectProxy
from appliance.egress.guard import EgressPolicy
from tests.support.nesting import INIT
from tests.support.peers import MEMORY
from tests.support.sandboxes import local_sandbox
from tests.support.servers import REPO

HOSTILE = REPO / "tests" / "support" / "hostile_stdio.py"


def tree(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        out += kids
        frontier += kids
    return out


def memory_kb(pids: list[int]) -> tuple[int, int]:
    rss = pss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                key, _, value = line.partition(":")
                if key == "Rss":
                    rss += int(value.split()[0])
                elif key == "Pss":
                    pss += int(value.split()[0])
        except OSError:
            continue
    return rss, pss


async def one(policy: StdioPolicy, spec: StdioSpec) -> tuple[float, int, int, int]:
    proc = StdioProcess("bench.kit", spec, policy)
    try:
        t0 = time.perf_counter()
        await proc.start()
        await proc.write_line(json.dumps(INIT).encode())
        await asyncio.wait_for(proc.read_line(), 60)
        took = time.perf_counter() - t0
        assert proc.pid is not None
        pids = tree(proc.pid)
        rss, pss = memory_kb(pids)
        return took, rss, pss, len(pids)
    finally:
        await proc.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    servers = {
        "python (hostile_stdio.py)": StdioSpec(command=sys.executable, args=(str(HOSTILE),)),
        "node (server-memory)": StdioSpec(
            command="node", args=(str(MEMORY),), env={"MEMORY_FILE_PATH": "/tmp/graph.jsonl"}
        ),
    }
    print(f"{runs} runs each; root: {os.geteuid() == 0}; {probe().detail}\n")
    print("| server | mode | cold start median ms | p90 ms | tree RSS MiB | tree PSS MiB | processes |")
    print("|---|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        box = local_sandbox(data)
        if box is None:
            print(f"no sandbox here: {probe().detail}")
            return
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        plain = StdioPolicy(workdir_root=data / "stdio", base_env=env)
        boxed = StdioPolicy(workdir_root=data / "stdio", base_env=env, sandbox=box)
        proxies = ConnectProxy(EgressPolicy(["127.0.0.1/32"]))
        proxied = StdioPolicy(workdir_root=data / "stdio", base_env=env, sandbox=box, egress=proxies)
        for name, spec in servers.items():
            pss_by_mode: dict[str, float] = {}
            allowed = dataclasses.replace(spec, allow_hosts=("localhost:9",))
            modes = (("plain", plain, spec), ("sandboxed", boxed, spec), ("+ allowed host", proxied, allowed))
            for mode, policy, spec_ in modes:
                results = [asyncio.run(one(policy, spec_)) for _ in range(runs)]
                starts = sorted(r[0] * 1000 for r in results)
                rss = statistics.median(r[1] for r in results) / 1024
                pss = statistics.median(r[2] for r in results) / 1024
                pss_by_mode[mode] = pss
                p90 = starts[min(len(starts) - 1, int(len(starts) * 0.9))]
                print(
                    f"| {name} | {mode} | {statistics.median(starts):.0f} | {p90:.0f} | "
                    f"{rss:.1f} | {pss:.1f} | {results[0][3]} |"
                )
            print(f"| {name} | overhead | | | | {pss_by_mode['sandboxed'] - pss_by_mode['plain']:+.1f} | |")
            extra = pss_by_mode["+ allowed host"] - pss_by_mode["sandboxed"]
            print(f"| {name} | proxy overhead | | | | {extra:+.1f} | |")
        direct, tunnel = asyncio.run(connect_overhead(Path(tmp), runs * 20))
        print(
            f"\nconnect + one echoed line, {runs * 20} times: direct median {direct[0]:.2f} ms "
            f"(p90 {direct[1]:.2f}), through the proxy {tunnel[0]:.2f} ms (p90 {tunnel[1]:.2f})"
        )


async def connect_overhead(folder: Path, count: int) -> tuple[tuple[float, float], tuple[float, float]]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    handle = await ConnectProxy(EgressPolicy(["127.0.0.1/32"])).serve(
        "bench", [f"localhost:{port}"], folder / "p.sock"
    )
    direct: list[float] = []
    tunnel: list[float] = []
    for _ in range(count):
        t0 = time.perf_counter()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping\n")
        await reader.readline()
        writer.close()
        direct.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        reader, writer = await asyncio.open_unix_connection(str(handle.path))
        writer.write(f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode())
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"ping\n")
        await reader.readline()
        writer.close()
        tunnel.append((time.perf_counter() - t0) * 1000)
    await handle.aclose()
    server.close()

    def stats(values: list[float]) -> tuple[float, float]:
        values.sort()
        return statistics.median(values), values[int(len(values) * 0.9)]

    return stats(direct), stats(tunnel)


if __name__ == "__main__":
    main()
