"""Issue 21's sandbox acceptance: a hostile stdio server, imported the normal way, is contained.

``tests/support/hostile_stdio.py`` is imported with the real CLI and called through the
gateway with the official SDK client. Each tool tries something a local server must not do
(read the master key, the database, another toolkit's directories, an ssh key; reach
loopback, the gateway, the internet; fork, map memory, write without bound) and answers what
happened: every attempt fails, and the gateway keeps serving the other toolkits. Two
toolkits started from the same server keep separate state, and when the gateway stops, no
process of the hostile server is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from appliance.children.disk import probe_disk
from appliance.children.sandbox import probe
from tests.support.accounts import admin
from tests.support.clients import connect
from tests.support.peers import MEMORY
from tests.support.servers import REPO, Appliance, import_mcp, running_appliance

pytestmark = pytest.mark.e2e
HOSTILE = REPO / "tests" / "support" / "hostile_stdio.py"
PROCESSES = 64
TOOLS = 12
OPEN_FILES = 256
DISK_MB = 24
# Small limits, so that hitting each costs little; the defaults are docs/configuration.md's.
LIMITS = {
    "TOOLSPOKE_STDIO_SANDBOX": "require",
    "TOOLSPOKE_STDIO_SANDBOX_PROCESSES": str(PROCESSES),
    "TOOLSPOKE_STDIO_SANDBOX_MEMORY_MB": "2048",
    "TOOLSPOKE_STDIO_SANDBOX_FILE_MB": "16",
    "TOOLSPOKE_STDIO_SANDBOX_TMP_MB": "8",
    "TOOLSPOKE_STDIO_SANDBOX_CPU_S": "3",
    "TOOLSPOKE_STDIO_SANDBOX_OPEN_FILES": str(OPEN_FILES),
}

if not probe().available:
    pytest.skip(f"no sandbox here: {probe().detail}", allow_module_level=True)
# The total disk bound needs a root gateway (loop mounts): tested where it can be set.
BOUNDED = probe_disk() == ""
if BOUNDED:
    LIMITS["TOOLSPOKE_STDIO_SANDBOX_DISK_MB"] = str(DISK_MB)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


@dataclass
class Site:
    app: Appliance
    data: Path
    ssh_key: Path
    echo_port: int


@contextlib.contextmanager
def echo_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 answering each connection's first line (what an allowed
    host is here: ALLOWED_TOOL_CIDRS opens 127.0.0.1 to the guard in these tests)."""

    class Echo(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.sendall(self.request.recv(64))

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo) as server:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield server.server_address[1]
        finally:
            server.shutdown()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("sandbox").resolve()
    home = base / "home"  # the gateway's HOME, with a private key in it
    (home / ".ssh").mkdir(parents=True)
    ssh_key = home / ".ssh" / "id_ed25519"
    ssh_key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    ssh_key.chmod(0o600)
    data = base / "data"
    with echo_server() as echo, running_appliance(data, env={**LIMITS, "HOME": str(home)}) as app:
        python = str(Path(sys.executable))
        for slug in ("hostile", "twin"):
            report = import_mcp(app, "--slug", slug, "--", python, str(HOSTILE))
            assert report["tool_count"] == TOOLS, report
            assert "sandbox network: none" in " ".join(report["notes"]), report
        # Allowed: the echo server, and 127.0.0.2 (which the guard refuses: not in the CIDRs).
        allowed = ("--allow-host", f"localhost:{echo}", "--allow-host", f"127.0.0.2:{echo}")
        report = import_mcp(app, "--slug", "reach", *allowed, "--", python, str(HOSTILE))
        assert report["tool_count"] == TOOLS, report
        for slug in ("memory", "memory2"):
            # The same command and the same file name for both: each file is in its own /tmp.
            report = import_mcp(
                app, "--slug", slug, "--env", "MEMORY_FILE_PATH=/tmp/graph.jsonl", "--", "node", str(MEMORY)
            )
            assert report["tool_count"] == 9, report
        yield Site(app, data, ssh_key, echo)
    # The gateway has stopped: nothing of the hostile servers lives on.
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _runs_hostile(pid)]
    assert left == [], left


def _runs_hostile(pid: str) -> bool:
    try:
        return str(HOSTILE).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


async def attempt(
    app: Appliance, tool: str, args: dict[str, Any], *, toolkit: str = "hostile"
) -> dict[str, Any]:
    async with connect(app) as client:
        result = await client.call_tool("use_tool", {"tool": f"{toolkit}__{tool}", "input": args})
        text = "".join(getattr(part, "text", "") for part in result.content)
        assert result.is_error is False, text
        return dict(json.loads(text))


def test_it_runs_as_an_unprivileged_user_in_its_own_directories(site: Site) -> None:
    me = run(attempt(site.app, "whoami", {}))
    assert me["uid"] != 0
    assert me["home"] == str(site.data / "stdio" / ".home" / "default.hostile")
    assert me["cwd"] == str(site.data / "stdio" / "default.hostile")
    assert me["pid"] < 10  # its own pid namespace


def test_the_master_key_the_database_and_other_toolkits_cannot_be_read(site: Site) -> None:
    targets = [
        site.data / "master.key",
        site.data / "toolspoke.db",
        site.data,  # not even its listing: the data directory is not in the sandbox
        site.data / "stdio" / "default.twin",
        site.data / "stdio" / ".home" / "default.twin",
        site.data / "stdio" / "default.memory",
        site.ssh_key,
        Path("~/.ssh/id_ed25519"),  # its HOME is its own
        Path("/root/.ssh"),
        Path("/etc/shadow"),
    ]
    for target in targets:
        seen = run(attempt(site.app, "read_file", {"path": str(target)}))
        if seen.get("entries") is not None:  # a mount point on the way to its own directory
            assert seen["entries"] in ([], ["stdio"], [".home", "default.hostile"]), (target, seen)
            continue
        assert seen["ok"] is False, (target, seen)
        assert seen["error"] in ("ENOENT", "EACCES"), (target, seen)
    assert site.data.joinpath("master.key").exists()  # it is there; the server cannot see it


def test_no_address_can_be_reached(site: Site) -> None:
    port = int(site.app.base_url.rsplit(":", 1)[1])
    for host, port_ in (
        ("127.0.0.1", port),
        ("127.0.0.1", 22),
        ("::1", port),
        ("1.1.1.1", 443),
        ("8.8.8.8", 53),
    ):
        seen = run(attempt(site.app, "connect", {"host": host, "port": port_}))
        assert seen["ok"] is False, (host, seen)
        assert seen["error"] in ("ECONNREFUSED", "ENETUNREACH", "EADDRNOTAVAIL"), (host, seen)


def test_only_an_allowed_host_the_guard_admits_is_reached_and_only_through_the_proxy(site: Site) -> None:
    gateway = int(site.app.base_url.rsplit(":", 1)[1])
    echo = site.echo_port
    # Without allowed hosts there is no proxy to ask.
    assert run(attempt(site.app, "via_proxy", {"host": "localhost", "port": echo}))["error"] == "no proxy"
    tunnel = run(attempt(site.app, "via_proxy", {"host": "localhost", "port": echo}, toolkit="reach"))
    assert tunnel == {"ok": True, "status": 200, "echo": "ping\n"}, tunnel
    for host, port in (
        ("127.0.0.1", gateway),  # the gateway itself: not listed
        ("localhost", gateway),
        ("127.0.0.1", echo),  # listed by name only
        ("127.0.0.2", echo),  # listed, but the guard refuses loopback outside the CIDRs
        ("1.1.1.1", 443),  # a public address: not listed
        ("localhost", 22),
    ):
        seen = run(attempt(site.app, "via_proxy", {"host": host, "port": port}, toolkit="reach"))
        assert seen == {"ok": False, "error": "refused", "status": 403}, (host, port, seen)
    # Around the proxy, its network namespace holds nothing: the echo server is not there.
    for host, port in (("127.0.0.1", echo), ("127.0.0.1", gateway), ("1.1.1.1", 443)):
        seen = run(attempt(site.app, "connect", {"host": host, "port": port}, toolkit="reach"))
        assert seen["ok"] is False and seen["error"] in ("ECONNREFUSED", "ENETUNREACH"), (host, seen)
    listed = {
        k["toolkit"]: k["allowed_hosts"] for k in admin(site.app, "GET", "/toolkits").json()["toolkits"]
    }
    assert listed["reach"] == [f"localhost:{echo}", f"127.0.0.2:{echo}"] and listed["hostile"] == []
    logged = "stdio default.reach: egress refused for '127.0.0.2' port"
    assert wait_for(lambda: any(logged in line for line in site.app.output)), site.app.output[-20:]


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Poll ``condition`` until it holds (the log is read by another thread), bounded."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_fork_bomb_stops_at_the_process_limit(site: Site) -> None:
    seen = run(attempt(site.app, "fork_bomb", {"limit": 5000}))
    assert seen["ok"] is False and seen["error"] == "EAGAIN", seen
    assert seen["forked"] < PROCESSES, seen
    assert run(attempt(site.app, "whoami", {}))["ok"] is True  # and the server still answers


def test_descriptors_stop_at_the_open_files_limit(site: Site) -> None:
    held = run(attempt(site.app, "open_files", {}))
    assert held["ok"] is False and held["error"] == "EMFILE", held
    assert 0 < held["opened"] < OPEN_FILES, held
    assert run(attempt(site.app, "whoami", {}))["ok"] is True  # it closed them and still answers


def test_memory_and_files_are_bounded(site: Site) -> None:
    mapped = run(attempt(site.app, "allocate", {}))
    assert mapped["ok"] is False and mapped["mapped_mb"] < 2048, mapped
    big = run(attempt(site.app, "fill_disk", {}))
    assert big["ok"] is False and big["error"] == "EFBIG" and big["written_mb"] <= 16, big
    tmp = run(attempt(site.app, "fill_disk", {"path": "/tmp/filler.bin"}))
    assert tmp["ok"] is False and tmp["error"] == "ENOSPC" and tmp["written_mb"] <= 8, tmp


@pytest.mark.skipif(not BOUNDED, reason=f"no disk bound here: {probe_disk()}")
def test_many_files_stop_at_the_total_disk_bound_and_the_gateway_keeps_serving(site: Site) -> None:
    for folder in (".", "~"):  # the work directory, then HOME: each its own bounded filesystem
        many = run(attempt(site.app, "fill_many", {"folder": folder}))
        assert many["ok"] is False and many["error"] == "ENOSPC", many
        assert 4 <= many["written_mb"] <= DISK_MB, many
    assert run(attempt(site.app, "whoami", {}, toolkit="twin"))["ok"] is True  # the others are served
    assert run(attempt(site.app, "remember", {"note": "room again"}))["ok"] is True  # its files are gone
    images = sorted(p.name for p in (site.data / "stdio" / ".disk").glob("default.hostile.*.img"))
    assert images == ["default.hostile.home.img", "default.hostile.work.img"]


def test_cpu_time_is_bounded_and_the_server_comes_back(site: Site) -> None:
    async def scenario() -> None:
        async with connect(site.app) as client:
            spun = await client.call_tool("use_tool", {"tool": "twin__spin", "input": {"seconds": 30}})
            assert spun.is_error is True
            said = "".join(getattr(p, "text", "") for p in spun.content)
            assert "was killed by SIGXCPU (in its sandbox)" in said, said
        assert (await attempt(site.app, "whoami", {}, toolkit="twin"))["ok"] is True

    run(scenario())


def test_the_gateway_keeps_serving_and_two_toolkits_of_one_server_keep_separate_state(site: Site) -> None:
    async def scenario() -> None:
        assert (await attempt(site.app, "remember", {"note": "hostile's"}))["ok"] is True
        assert (await attempt(site.app, "recall", {}, toolkit="twin")).get("notes") in (None, [])
        async with connect(site.app) as client:
            entity = {"name": "Ada", "entityType": "person", "observations": ["in memory only"]}
            created = await client.call_tool(
                "run_tool", {"tool": "memory__create_entities", "input": {"entities": [entity]}}
            )
            assert created.is_error is False, created.content
            other = await client.call_tool("use_tool", {"tool": "memory2__read_graph", "input": {}})
            assert other.is_error is False, other.content
            assert "Ada" not in "".join(getattr(p, "text", "") for p in other.content)
            mine = await client.call_tool("use_tool", {"tool": "memory__read_graph", "input": {}})
            assert "Ada" in "".join(getattr(p, "text", "") for p in mine.content)

    run(scenario())
