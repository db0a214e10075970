"""Real MCP peers for tests: start a server on a free loopback port, stop its whole group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT / "tests" / "support" / "upstream_server.py"
EVERYTHING = ROOT / "tests" / "peers" / "node_modules" / ".bin" / "mcp-server-everything"
# The npm reference servers' entry points, run as ``node <path>`` (nothing fetched at test time).
_NPM = ROOT / "tests" / "peers" / "node_modules" / "@modelcontextprotocol"
MEMORY = _NPM / "server-memory" / "dist" / "index.js"
FILESYSTEM = _NPM / "server-filesystem" / "dist" / "index.js"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def peer(argv: list[str], port: int, log: Path, env: dict[str, str] | None = None) -> Iterator[None]:
    """Run a server in its own process group until the block ends; wait for its port."""
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"{argv[1]} exited: {log.read_text()[-2000:]}")
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{argv[1]} did not listen on {port}") from None
                    time.sleep(0.05)
            yield
        finally:
            try:  # the whole group: npm-style launchers leave children holding the port
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
            except ProcessLookupError:
                proc.wait(timeout=5)
