"""Smoke test of the one-file binary: start it, initialize over MCP, search, call a tool, load
the console's sign-in page and its script, stop.

Run as ``python build/smoke.py dist/toolspoke``. Uses the built-in demo toolkit, so it
needs no network and no upstream of its own. Prints the binary's size and its time from
start to a served ``initialize``; exits non-zero on any failure.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

KEY = "tsk_smoke-test-key-0123456789abcdefghijklmnop"
DEADLINE_S = 60


def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {KEY}",
            **headers,
        },
    )
    assert url.startswith("http://127.0.0.1:")  # the loopback server this script started
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read()), dict(resp.headers)


def _process_maps(pid: int) -> list[str]:
    """The memory maps of ``pid`` and its descendants (the one-file bootloader runs the app in a
    child process)."""
    found = []
    pending = [pid]
    while pending:
        current = pending.pop()
        root = Path(f"/proc/{current}")
        found.append((root / "maps").read_text())
        for task in (root / "task").iterdir():
            pending += [int(c) for c in (task / "children").read_text().split()]
    return found


def main() -> int:
    binary = Path(sys.argv[1]).resolve()
    size_mb = binary.stat().st_size / 1e6
    data = tempfile.mkdtemp(prefix="toolspoke-smoke-")
    # No embeddings setting: by default the binary uses the local model inside it, and must
    # embed and rank offline on its own.
    env = {
        **{k: v for k, v in os.environ.items() if k != "TOOLSPOKE_EMBEDDINGS"},
        "TOOLSPOKE_DATA_DIR": data,
        "TOOLSPOKE_ADMIN_KEY": KEY,
        "TOOLSPOKE_CODE_TOOLS": "1",  # the JavaScript engine must be inside the binary too
    }
    init = subprocess.run([str(binary), "init"], env=env, capture_output=True, text=True, timeout=DEADLINE_S)
    assert init.returncode == 0, init.stderr
    started = time.perf_counter()
    proc = subprocess.Popen(
        [str(binary), "serve", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    found: list[str] = []
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            match = re.search(r"serving MCP on (\S+)", line)
            if match:
                found.append(match.group(1))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        while not found:
            if proc.poll() is not None or time.perf_counter() - started > DEADLINE_S:
                print("".join(lines), file=sys.stderr)
                raise SystemExit("binary did not start")
            reader.join(0.05)
        url = found[0]
        init_msg = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "smoke", "version": "1"},
            },
        }
        result, headers = post(url, init_msg, {})
        ready_s = time.perf_counter() - started
        assert result["result"]["serverInfo"]["name"] == "toolspoke", result
        session = {"Mcp-Session-Id": headers["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"}
        listed, _ = post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session)
        assert "search_tools" in {t["name"] for t in listed["result"]["tools"]}, listed
        call = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "search_tools", "arguments": {"query": "create a note"}},
        }
        found_tools, _ = post(url, call, session)
        assert "result" in found_tools, (found_tools, "".join(lines)[-3000:])
        names = [r["name"] for r in found_tools["result"]["structuredContent"]["results"]]
        assert "demo__createNote" in names, names
        call = {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {
                "name": "run_tool",
                "arguments": {"tool": "demo__createNote", "input": {"body": {"title": "smoke"}}},
            },
        }
        created, _ = post(url, call, session)
        assert created["result"]["isError"] is False, created
        assert created["result"]["structuredContent"]["title"] == "smoke", created
        # A script in the embedded engine (issue 24): it reads the notes through the pipeline.
        script = "const notes = await demo__listNotes({}); return notes.map((n) => n.title);"
        code = {**call, "id": 6, "params": {"name": "use_code", "arguments": {"code": script}}}
        ran, _ = post(url, code, session)
        assert ran["result"]["isError"] is False, ran
        assert ran["result"]["structuredContent"]["result"] == ["smoke"], ran
        # Semantic search by default with the model inside the binary: the server embeds the
        # catalogue in the background, and the same search turns hybrid once it has.
        search = {
            **call,
            "id": 5,
            "params": {"name": "search_tools", "arguments": {"query": "jot down a memo"}},
        }
        give_up = time.monotonic() + DEADLINE_S
        while True:
            hybrid, _ = post(url, search, session)
            ranking = hybrid["result"]["structuredContent"]["ranking"]
            if ranking == "hybrid" or time.monotonic() > give_up:
                break
            time.sleep(0.2)  # polling a condition, bounded by the deadline
        assert ranking == "hybrid", hybrid
        # The learned query adapter ships beside the model (search/adapter.py) and applies to it.
        status = subprocess.run(
            [str(binary), "semantic", "status", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
        assert status.returncode == 0 and json.loads(status.stdout)["query_adapter"] is True, status
        # The console's templates and static files are inside the binary: a page and htmx.
        assert url.startswith("http://127.0.0.1:")  # the loopback server this script started
        console = url.removesuffix("/mcp") + "/console/"
        with urllib.request.urlopen(console + "sign-in", timeout=30) as resp:
            page = resp.read().decode()
            assert "Sign in to the console" in page and resp.headers["X-Frame-Options"] == "DENY", page[:300]
        with urllib.request.urlopen(console + "static/htmx.min.js", timeout=30) as resp:
            assert b"htmx" in resp.read()
        loop = "uvloop" if any("uvloop" in maps for maps in _process_maps(proc.pid)) else "asyncio"
        assert loop == "uvloop", "the binary serves on the stock loop: uvloop is missing from the bundle"
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    print(f"smoke ok: binary {size_mb:.1f} MB, start to served initialize {ready_s:.2f} s", end="")
    print(f", search {ranking} with the query adapter, loop {loop}, a use_code script ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
