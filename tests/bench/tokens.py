"""What the bridge costs an agent's context: tools/list, list_toolkits and search_tools answers.

Run from the repo root: ``.venv/bin/python tests/bench/tokens.py``. Starts a real appliance on
loopback, imports the 14 fixture specs of tests/fixtures/openapi/ and measures what a client
receives; tokens are estimated as bytes / 4 of the compact JSON. "answer" is the text block a
model reads; "wire" is the whole tools/call result (text block and structuredContent).
Targets (issue 22): tools/list ≤ 700 tokens; list_toolkits ≤ 8.5 tokens per tool; the median
search_tools answer with 5 results at most half of what it was before compact answers.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.servers import FIXTURES, cli, running_appliance

SPECS = sorted(p for p in FIXTURES.iterdir() if p.suffix in {".json", ".yaml"})
VERSION = "2025-11-25"
INIT = {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "tokens", "version": "1"}}

# What agents ask of these specs: Kubernetes, Slack, Asana, DigitalOcean, Gotify, the
# petstores, USPTO, the museum and the callback/webhook examples.
QUERIES = [
    "list pods in a namespace",
    "read the logs of a pod",
    "scale a deployment to three replicas",
    "delete a config map",
    "create a namespace",
    "watch services for changes",
    "create a persistent volume claim",
    "get the status of a node",
    "post a message to a slack channel",
    "invite a user to a channel",
    "upload a file to slack",
    "list members of a slack workspace",
    "add a reaction emoji to a message",
    "set my slack status",
    "create a task in asana",
    "assign an asana task to a teammate",
    "list projects in a workspace",
    "add a comment to a task",
    "create a droplet",
    "list my droplets",
    "create a dns record for a domain",
    "resize a kubernetes cluster on digitalocean",
    "take a snapshot of a volume",
    "create a load balancer",
    "send a push notification",
    "create a gotify application",
    "add a new pet to the store",
    "find pets by status",
    "place an order for a pet",
    "delete a pet",
    "search the uspto patent datasets",
    "buy museum tickets for a special event",
    "list museum opening hours",
    "subscribe to callbacks for new events",
]


def session(http: httpx.Client, url: str) -> dict[str, str]:
    r = http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
    r.raise_for_status()
    return {"Mcp-Session-Id": r.headers["mcp-session-id"], "MCP-Protocol-Version": VERSION}


def rpc(http: httpx.Client, url: str, headers: dict[str, str], method: str, params: dict[str, Any]) -> Any:
    r = http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": method, "params": params})
    r.raise_for_status()
    doc = r.json()
    if "error" in doc:
        raise RuntimeError(f"{method}: {doc['error']}")
    return doc["result"]


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def text_of(result: dict[str, Any]) -> str:
    return "".join(c["text"] for c in result["content"] if c.get("type") == "text")


def tool_count(structured: dict[str, Any]) -> int:
    """Tools in a list_toolkits answer: names per toolkit, or (brief) per domain."""
    total = 0
    for kit in structured.get("toolkits", []):
        total += len(kit.get("tools", []))
        total += sum(len(tools) for tools in kit.get("domains", {}).values())
    return total


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, running_appliance(Path(tmp) / "data") as app:
        for spec in SPECS:
            slug = spec.stem.lower().replace(".", "-").replace("_", "-")[:40].strip("-")
            done = cli(
                app.data_dir,
                "import",
                "openapi",
                str(spec),
                "--slug",
                slug,
                "--base-url",
                "https://api.example.com",
                "--json",
                timeout=300,
            )
            # The webhook example defines no operation: the import refuses it, as it should.
            assert done.returncode == 0 or "nothing to import" in done.stderr, done.stderr
        with httpx.Client(
            headers={"Authorization": f"Bearer {app.key}", "Accept": "application/json"}, timeout=120
        ) as http:
            headers = session(http, app.mcp_url)
            listed = rpc(http, app.mcp_url, headers, "tools/list", {})
            kits = rpc(http, app.mcp_url, headers, "tools/call", {"name": "list_toolkits", "arguments": {}})
            brief = None
            brief_args = {"brief": True}
            schema = next(t for t in listed["tools"] if t["name"] == "list_toolkits")["inputSchema"]
            if "brief" in schema.get("properties", {}):
                brief = rpc(
                    http,
                    app.mcp_url,
                    headers,
                    "tools/call",
                    {"name": "list_toolkits", "arguments": brief_args},
                )
            answers, wires = [], []
            for query in QUERIES:
                found = rpc(
                    http,
                    app.mcp_url,
                    headers,
                    "tools/call",
                    {"name": "search_tools", "arguments": {"query": query, "limit": 5}},
                )
                answers.append(len(text_of(found).encode()))
                wires.append(size(found))
                first = (found.get("structuredContent") or {}).get("results") or [{}]
                top = first[0].get("name", "-")
                print(f"  {query!r}: {answers[-1]} bytes, top {top}", file=sys.stderr)
            k8s_top = rpc(
                http,
                app.mcp_url,
                headers,
                "tools/call",
                {"name": "search_tools", "arguments": {"query": "list pods in a namespace", "limit": 1}},
            )
            one = (k8s_top.get("structuredContent") or {}).get("results") or []
            described = None
            if one:
                described = rpc(
                    http,
                    app.mcp_url,
                    headers,
                    "tools/call",
                    {"name": "describe_tools", "arguments": {"names": [one[0]["name"]]}},
                )

    listed_bytes = size(listed)
    kits_text = len(text_of(kits).encode())
    kits_tools = tool_count(kits["structuredContent"])
    median = statistics.median(answers)
    print(f"| figure | before ({BEFORE_AT}) | now |")
    print("|---|---|---|")
    row(
        f"bridge tools/list ({len(listed['tools'])} tools, target ≤ 700 tokens)",
        BEFORE["tools_list"],
        listed_bytes,
        tokens=True,
    )
    row(f"list_toolkits, {kits_tools} tools, answer bytes", BEFORE["list_toolkits"], kits_text, tokens=True)
    print(
        f"| list_toolkits, tokens per tool (target ≤ 8.5) | {BEFORE['list_toolkits'] / 4 / kits_tools:.1f} "
        f"| {kits_text / 4 / max(kits_tools, 1):.1f} |"
    )
    row("list_toolkits, wire (text + structuredContent)", BEFORE["list_toolkits_wire"], size(kits))
    if brief is not None:
        brief_text = len(text_of(brief).encode())
        brief_tools = tool_count(brief["structuredContent"])
        print(
            f"| list_toolkits brief ({brief_tools} tools by domain, one line each), answer | not offered | "
            f"{brief_text} bytes ≈ {brief_text // 4} tokens, "
            f"{brief_text / 4 / max(brief_tools, 1):.1f} per tool |"
        )
    row(
        f"search_tools answer, 5 results, median of {len(QUERIES)} queries",
        BEFORE["search"],
        median,
        tokens=True,
    )
    print(f"| search_tools answer, now / before (target ≤ 0.5) | | {median / BEFORE['search']:.2f} |")
    print(f"| search_tools answer, smallest / largest | 2037 / 45429 | {min(answers)} / {max(answers)} |")
    row("search_tools wire, median", BEFORE["search_wire"], statistics.median(wires))
    if described is not None:
        row(
            f"describe_tools of {one[0]['name']}, answer",
            BEFORE["describe"],
            len(text_of(described).encode()),
        )


# Measured with this benchmark on main at 3ea0496, before compact answers (issue 22).
BEFORE_AT = "main 3ea0496"
BEFORE = {
    "tools_list": 4542,
    "list_toolkits": 120983,
    "list_toolkits_wire": 246910,
    "search": 7490,
    "search_wire": 15647,
    "describe": 3593,
}


def row(label: str, before: float, now: float, *, tokens: bool = False) -> None:
    def cell(n: float) -> str:
        return f"{n:.0f} bytes ≈ {n / 4:.0f} tokens" if tokens else f"{n:.0f} bytes"

    print(f"| {label} | {cell(before)} | {cell(now)} |")


if __name__ == "__main__":
    main()
