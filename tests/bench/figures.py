"""Appliance figures: bridge token cost, list_toolkits over Kubernetes, import time, binary.

Run from the repo root: ``.venv/bin/python tests/bench/figures.py [path/to/binary]``.
Starts a real appliance on loopback; tokens are estimated as bytes / 4 of the JSON a
client receives. The binary figures need a built binary (``make binary``; default
``dist/toolspoke``) and are skipped without one.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.servers import FIXTURES, cli, running_appliance

K8S = FIXTURES / "kubernetes-swagger.json"


INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "figures", "version": "1"},
}


def session(http: httpx.Client, url: str) -> dict[str, str]:
    r = http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
    return {"Mcp-Session-Id": r.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}


def rpc(http: httpx.Client, url: str, headers: dict[str, str], method: str, params: dict[str, Any]) -> Any:
    r = http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": method, "params": params})
    r.raise_for_status()
    return r.json()["result"]


def appliance_figures() -> None:
    with tempfile.TemporaryDirectory() as tmp, running_appliance(Path(tmp) / "data") as app:
        imports = []
        for i in range(3):
            t0 = time.perf_counter()
            done = cli(
                app.data_dir,
                "import",
                "openapi",
                str(K8S),
                "--slug",
                f"k8s{i}" if i else "k8s",
                "--base-url",
                "https://k8s.example.com",
                "--json",
            )
            wall = time.perf_counter() - t0
            assert done.returncode == 0, done.stderr
            imports.append((wall, json.loads(done.stdout)["seconds"]))
        for i in (1, 2):
            cli(app.data_dir, "toolkits", "remove", f"k8s{i}")
        with httpx.Client(
            headers={"Authorization": f"Bearer {app.key}", "Accept": "application/json"}, timeout=60
        ) as http:
            headers = session(http, app.mcp_url)
            tools = rpc(http, app.mcp_url, headers, "tools/list", {})
            listed = json.dumps(tools, separators=(",", ":"))
            kits = rpc(http, app.mcp_url, headers, "tools/call", {"name": "list_toolkits", "arguments": {}})
            k8s = next(k for k in kits["structuredContent"]["toolkits"] if k["toolkit"] == "k8s")
            k8s_text = json.dumps({"toolkits": [k8s]}, separators=(",", ":"))
            whole_text = kits["content"][0]["text"]
            search = rpc(
                http,
                app.mcp_url,
                headers,
                "tools/call",
                {"name": "search_tools", "arguments": {"query": "list pods in a namespace"}},
            )
            search_text = search["content"][0]["text"]
    print("| figure | value |")
    print("|---|---|")
    print(f"| bridge tools/list (7 tools) | {len(listed)} bytes ≈ {len(listed) // 4} tokens (target ≤ 700) |")
    print(
        f"| list_toolkits, Kubernetes toolkit alone ({len(k8s['tools'])} tools) | {len(k8s_text)} bytes "
        f"≈ {len(k8s_text) // 4} tokens |"
    )
    print(f"| list_toolkits reply (k8s + demo), as the agent reads it | ≈ {len(whole_text) // 4} tokens |")
    print(f"| search_tools reply, 8 Kubernetes results, compact | ≈ {len(search_text) // 4} tokens |")
    walls = [w for w, _ in imports]
    inner = [s for _, s in imports]
    print(
        f"| import Kubernetes spec (1,123 ops), CLI wall time incl. Python start, median of 3 | "
        f"{statistics.median(walls):.2f} s (target ≤ 3 s) |"
    )
    print(f"| same, import itself (parse, convert, store, index) | {statistics.median(inner):.2f} s |")


def binary_figures(binary: Path) -> None:
    if not binary.exists():
        print(f"| binary | not built ({binary}); run `make binary` |")
        return
    done = subprocess.run(
        [sys.executable, "build/smoke.py", str(binary)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    match = re.search(r"binary ([\d.]+) MB, start to served initialize ([\d.]+) s", done.stdout)
    if done.returncode != 0 or not match:
        print(f"| binary smoke | FAILED: {done.stdout[-300:]} {done.stderr[-300:]} |")
        return
    print(f"| binary size | {match.group(1)} MB |")
    print(f"| binary start to served initialize | {match.group(2)} s |")


if __name__ == "__main__":
    appliance_figures()
    binary_figures(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("dist/toolspoke"))
