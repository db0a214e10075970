"""Memory and processes with 20 stdio MCP toolkits: idle, after use, and after the idle stop.

Run from the repo root: ``.venv/bin/python tests/bench/stdio_fleet.py [--toolkits N] [--cycles C]``.

A real appliance (``toolspoke serve``) with ``TOOLSPOKE_STDIO_IDLE_S=5`` (so the idle stop is
seen within seconds; the default is 600) and health probes off. Twenty toolkits ``s01..s20``
are imported with the real CLI, each running ``tests/support/upstream_server.py`` over stdio
(``UPSTREAM_TRANSPORT=stdio``). Figures come from ``/proc``: the gateway's VmRSS, and every
process below it (children and their descendants) with their RSS and state.

Phases: after the imports and one bridge call (children: 0, they start on first use); after
one call to every toolkit through the bridge (one child each); after the idle timeout (back to
0, no zombie, gateway RSS near its baseline). The use-and-idle cycle runs twice, so a leak
would show as growth from one cycle to the next. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.support.peers import UPSTREAM
from tests.support.servers import Appliance, cli, running_appliance

IDLE_S = 5.0


@dataclass
class Snapshot:
    phase: str
    gateway_kb: int
    children: int
    descendants: int
    tree_kb: int  # RSS of every process below the gateway
    zombies: int
    at_s: float

    def row(self) -> str:
        return (
            f"| {self.phase} | {self.gateway_kb / 1024:.1f} | {self.children} | {self.descendants} | "
            f"{self.zombies} | {self.tree_kb / 1024:.1f} | {(self.gateway_kb + self.tree_kb) / 1024:.1f} | "
            f"{self.at_s:.1f} |"
        )


def _status(pid: int) -> dict[str, str]:
    out = {}
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def _rss_kb(status: dict[str, str]) -> int:
    value = status.get("VmRSS", "0 kB").split()[0]  # a zombie has no VmRSS line
    return int(value)


def processes() -> dict[int, dict[str, str]]:
    """Every process's /proc status, skipping the ones that vanish while we read."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                out[int(entry)] = _status(int(entry))
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
    return out


def snapshot(phase: str, gateway: int, started: float) -> Snapshot:
    table = processes()
    below: list[int] = []
    frontier = [gateway]
    while frontier:
        parent = frontier.pop()
        kids = [pid for pid, st in table.items() if st.get("PPid") == str(parent)]
        below += kids
        frontier += kids
    children = [pid for pid in below if table[pid].get("PPid") == str(gateway)]
    zombies = sum(1 for pid in below if table[pid].get("State", "").startswith("Z"))
    return Snapshot(
        phase,
        _rss_kb(table[gateway]),
        len(children),
        len(below),
        sum(_rss_kb(table[pid]) for pid in below),
        zombies,
        time.monotonic() - started,
    )


def wait_for(
    phase: str, gateway: int, started: float, want_children: int, deadline_s: float
) -> tuple[Snapshot, bool]:
    """Poll until the gateway has ``want_children`` children (and no zombie), or the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        snap = snapshot(phase, gateway, started)
        if snap.children == want_children and snap.zombies == 0:
            return snap, True
        if time.monotonic() > deadline:
            return snap, False
        time.sleep(0.25)


def import_one(app: Appliance, slug: str) -> str:
    args = ["import", "mcp", "--slug", slug, "--json", "--env", "UPSTREAM_TRANSPORT=stdio"]
    for attempt in range(3):  # parallel imports may meet a busy database; try again
        done = cli(app.data_dir, *args, "--", sys.executable, str(UPSTREAM), timeout=120)
        if done.returncode == 0:
            tools = {t["name"] for t in json.loads(done.stdout)["tools"]}
            if f"{slug}__read_item" not in tools:
                raise RuntimeError(f"import {slug}: no {slug}__read_item in {sorted(tools)}")
            return slug
        if attempt == 2:
            raise RuntimeError(f"import {slug} failed: {done.stderr[-1000:]}")
        time.sleep(1)
    raise AssertionError("unreachable")


async def use(app: Appliance, slugs: list[str]) -> list[float]:
    """One bridge call (``use_tool`` on ``read_item``) per toolkit, all at once; seconds each."""
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {app.key}"}) as http,
        Client(streamable_http_client(app.mcp_url, http_client=http), read_timeout_seconds=90) as client,
    ):
        if not slugs:
            result = await client.call_tool("list_toolkits", {})
            if result.is_error:
                raise RuntimeError(f"list_toolkits failed: {result.content}")
            return []

        async def one(slug: str) -> float:
            t0 = time.perf_counter()
            args: dict[str, Any] = {"tool": f"{slug}__read_item", "input": {"key": "hello"}}
            result = await client.call_tool("use_tool", args)
            text = "".join(getattr(c, "text", "") for c in result.content)
            if result.is_error or "world" not in text:
                raise RuntimeError(f"{slug}: {text[:300]}")
            return time.perf_counter() - t0

        return list(await asyncio.wait_for(asyncio.gather(*(one(s) for s in slugs)), 150))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--toolkits", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=2)
    args = parser.parse_args()
    slugs = [f"s{i:02d}" for i in range(1, args.toolkits + 1)]
    env = {
        "TOOLSPOKE_STDIO_IDLE_S": str(IDLE_S),
        "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
        "TOOLSPOKE_MCP_RESYNC_S": "0",
    }
    started = time.monotonic()
    snaps: list[Snapshot] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, running_appliance(Path(tmp) / "data", env=env) as app:
        gateway = app.proc.pid
        snaps.append(snapshot("started, nothing imported", gateway, started))
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda slug: import_one(app, slug), slugs))
        notes.append(f"{len(slugs)} imports (CLI, 4 at a time): {time.perf_counter() - t0:.1f} s")
        asyncio.run(use(app, []))  # the bridge path itself is warm before the baseline
        snap, ok = wait_for(f"{len(slugs)} toolkits imported, idle (baseline)", gateway, started, 0, 15)
        snaps.append(snap)
        if not ok:
            notes.append(f"baseline: {snap.children} children still running after 15 s")
        baseline = snap.gateway_kb
        for cycle in range(1, args.cycles + 1):
            t0 = time.perf_counter()
            took = asyncio.run(use(app, slugs))
            wall = time.perf_counter() - t0
            snap, ok = wait_for(f"cycle {cycle}: after one call to each", gateway, started, len(slugs), 10)
            snaps.append(snap)
            notes.append(
                f"cycle {cycle}: {len(slugs)} concurrent first calls (cold starts) took {wall:.1f} s, "
                f"slowest {max(took):.1f} s, fastest {min(took):.1f} s"
            )
            if not ok:
                notes.append(f"cycle {cycle}: {snap.children} children after use, expected {len(slugs)}")
            used_at = time.monotonic()
            snap, ok = wait_for(f"cycle {cycle}: after idle stop", gateway, started, 0, IDLE_S + 30)
            snaps.append(snap)
            notes.append(
                f"cycle {cycle}: all children gone {time.monotonic() - used_at:.1f} s after use "
                f"(idle timeout {IDLE_S:.0f} s)"
                if ok
                else f"cycle {cycle}: {snap.children} children, {snap.zombies} zombies still there after "
                f"{IDLE_S + 30:.0f} s"
            )
            time.sleep(1)
            settled = snapshot(f"cycle {cycle}: idle, 1 s later", gateway, started)
            snaps.append(settled)
            notes.append(
                f"cycle {cycle}: gateway RSS {settled.gateway_kb / 1024:.1f} MB, "
                f"{(settled.gateway_kb - baseline) / 1024:+.1f} MB against the baseline "
                f"({(settled.gateway_kb - baseline) * 100 / baseline:+.1f} %)"
            )
        peak = _status(gateway).get("VmHWM", "?")
    print(f"Gateway pid {gateway}; RSS from /proc/<pid>/status VmRSS\n")
    print(
        "| phase | gateway RSS (MB) | children | all descendants | zombies | descendants RSS (MB) "
        "| total (MB) | t (s) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for snap in snaps:
        print(snap.row())
    print()
    for note in notes:
        print(f"- {note}")
    print(f"- gateway peak RSS (VmHWM): {peak}")
    print(f"- wall time {time.monotonic() - started:.0f} s on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
