"""`make bench`: every benchmark in turn, printing the figures the issues ask for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS = (
    (
        "Retrieval quality (dev queries; lexical, semantic, hybrid; own and pooled catalogues)",
        ["retrieval.py"],
    ),
    (
        "Search that learns from use: the usage boost on a replayed log (dev queries, hybrid)",
        ["usage_replay.py"],
    ),
    ("The search usage log's cost to an agent's call (search, then use_tool)", ["usage_call_cost.py"]),
    ("Search latency (agent's search_tools, default limit 8)", ["search_latency.py", "10000", "100000"]),
    (
        "Hostile search_tools input: worst case per size, up to the query limit and past it",
        ["hostile_search.py"],
    ),
    ("Search with access filtering (10k tools, 200 toolkits, 50 agents)", ["access_search.py"]),
    (
        "Hybrid search latency (local model, query embedded per search)",
        ["hybrid_latency.py", "10000", "100000"],
    ),
    (
        "Hybrid search at 100,000 tools: real backfill time, memory, latency (local model)",
        ["scale.py", "100000"],
    ),
    ("Appliance figures", ["figures.py"]),
    ("Context cost: tools/list, list_toolkits and search_tools over the 14 fixture specs", ["tokens.py"]),
    ("MCP upstreams: gateway overhead per tools/call, both eras", ["mcp_overhead.py"]),
    ("Code over tools: a script's 10 read calls against the same 10 made directly", ["code_tools.py"]),
    ("MCP upstreams: 20 stdio toolkits, memory and processes", ["stdio_fleet.py"]),
    ("The stdio sandbox: cold start inside and outside, memory per sandboxed server", ["sandbox.py"]),
    ("Spend and accounting: what it adds to a call, calls/s through the full path", ["accounting.py"]),
    ("Vault and egress: sealing, rotation, guard cost", ["vault_bench.py"]),
    ("Redaction: a 1 MiB answer against 1,000 vault secrets", ["redaction_bench.py"]),
    ("Tool-description screening: recall, false positives, time per 1,000 tools", ["screening.py"]),
)

if __name__ == "__main__":
    for title, args in STEPS:
        print(f"\n## {title}\n", flush=True)
        subprocess.run([sys.executable, str(HERE / args[0]), *args[1:]], check=True, cwd=HERE.parents[1])
