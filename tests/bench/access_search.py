"""Search latency with access filtering vs without, on 10,000 tools in 200 toolkits, 50 agents.

Run from the repo root: ``.venv/bin/python tests/bench/access_search.py``.

The catalogue is search_latency.py's 10,000 tools, spread over 200 toolkits owned by 10 users
(20 published, 5 platform defaults, 10 with an allow-list of half their tools). Each user has
5 agents; each agent holds grants on 8 toolkits its user reaches, a quarter of them for
selected tools only, and opts out of one default. The same 500 queries run through the
agent-facing ``search_tools`` unfiltered (the operator) and as the agents in turn (and as the
users' own keys). Target (issue 4): filtered within 1.5x of unfiltered.
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance import config
from appliance.access import visibility
from appliance.gateway.runtime import Runtime
from appliance.gateway.searching import search_tools
from appliance.models import Principal
from appliance.search import metrics
from tests.bench.search_latency import MIGRATIONS, build, queries

TOOLS, KITS, USERS, AGENTS_PER_USER, GRANTS_PER_AGENT = 10_000, 200, 10, 5, 8
ROUNDS = 3


async def setup(rt: Runtime, rng: random.Random) -> tuple[list[Principal], list[Principal], list[str]]:
    names = await build(rt.db, TOOLS)
    async with rt.db.write() as tx:
        users = [
            await tx.run("INSERT INTO users (name, is_admin) VALUES (?, 0)", (f"user{i}",))
            for i in range(USERS)
        ]
        old = [int(r["id"]) for r in await tx.all("SELECT id FROM toolkits")]
        kits = []
        for k in range(KITS):
            kits.append(
                await tx.run(
                    "INSERT INTO toolkits (project_id, slug, source_kind, owner_id, visibility, is_default)"
                    " VALUES (1, ?, 'catalog', ?, ?, ?)",
                    (
                        f"kit{k}",
                        users[k % USERS],
                        "published" if k % 10 == 0 else "private",
                        int(k % 40 == 1),
                    ),
                )
            )
        await tx.run(
            "UPDATE tools SET toolkit_id = (SELECT id FROM toolkits WHERE slug = 'kit' || (tools.id % ?))",
            (KITS,),
        )
        await tx.run_many("DELETE FROM toolkits WHERE id = ?", [(i,) for i in old])
        for k in range(0, KITS, KITS // 10):  # allow-lists on 10 toolkits: half their tools
            rows = await tx.all("SELECT name FROM tools WHERE toolkit_id = ? ORDER BY id", (kits[k],))
            await tx.run_many(
                "INSERT INTO toolkit_allowed_tools (toolkit_id, tool_name) VALUES (?, ?)",
                [(kits[k], r["name"]) for r in rows[::2]],
            )
        agents: list[Principal] = []
        for u, user_id in enumerate(users):
            reach = [kits[k] for k in range(KITS) if k % USERS == u or k % 10 == 0 or k % 40 == 1]
            for a in range(AGENTS_PER_USER):
                agent_id = await tx.run(
                    "INSERT INTO agents (user_id, name) VALUES (?, ?)", (user_id, f"a{a}")
                )
                for kit in rng.sample(reach, GRANTS_PER_AGENT):
                    grant = await tx.run(
                        "INSERT INTO grants (agent_id, toolkit_id) VALUES (?, ?)", (agent_id, kit)
                    )
                    if rng.random() < 0.25:
                        rows = await tx.all("SELECT name FROM tools WHERE toolkit_id = ? LIMIT 10", (kit,))
                        await tx.run_many(
                            "INSERT INTO grant_tools (grant_id, tool_name) VALUES (?, ?)",
                            [(grant, r["name"]) for r in rows],
                        )
                defaults = [kits[k] for k in range(KITS) if k % 40 == 1]
                await tx.run(
                    "INSERT OR IGNORE INTO grants (agent_id, toolkit_id, enabled) VALUES (?, ?, 0)",
                    (agent_id, rng.choice(defaults)),
                )
                agents.append(Principal(user_id, f"a{a}", False, f"agent{agent_id}", agent_id=agent_id))
    await rt.db.checkpoint()
    owners = [Principal(user_id, f"user{i}", False, f"user{user_id}") for i, user_id in enumerate(users)]
    return agents, owners, names


async def timed(rt: Runtime, qs: list[str], who: list[Principal] | None) -> dict[str, float]:
    rounds = []
    for _ in range(ROUNDS):
        ms = []
        for i, q in enumerate(qs):
            principal = None if who is None else who[i % len(who)]
            t = time.perf_counter()
            await search_tools(rt, q, principal=principal)
            ms.append((time.perf_counter() - t) * 1000)
        rounds.append(metrics.latency_summary(ms))
    return sorted(rounds, key=lambda r: r["p50"])[len(rounds) // 2]


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rt = Runtime(config.load(env={"TOOLSPOKE_DATA_DIR": tmp}))
        await rt.open(MIGRATIONS)
        try:
            rng = random.Random(4)
            agents, owners, names = await setup(rt, rng)
            qs = queries(names, random.Random(7))
            for q in qs[:50]:  # warm the page cache
                await search_tools(rt, q)
            # The scope itself, computed cold (as after any commit) for every agent.
            cold = []
            async with rt.db.read() as conn:
                for agent in agents:
                    t = time.perf_counter()
                    await conn.batch(lambda r, a=agent: visibility._compute(r, a))
                    cold.append((time.perf_counter() - t) * 1000)
            plain = await timed(rt, qs, None)
            as_agents = await timed(rt, qs, agents)
            as_users = await timed(rt, qs, owners)
        finally:
            await rt.close()
    print(
        f"{TOOLS:,} tools in {KITS} toolkits; {len(agents)} agents with {GRANTS_PER_AGENT} grants each; "
        f"{len(qs)} queries; median of {ROUNDS} rounds"
    )
    print("| caller | p50 ms | p95 ms | p99 ms | p50 vs unfiltered |")
    print("|---|---|---|---|---|")
    for label, row in (
        ("unfiltered (operator)", plain),
        ("agents (grants)", as_agents),
        ("users' own keys", as_users),
    ):
        ratio = row["p50"] / plain["p50"]
        print(f"| {label} | {row['p50']:.2f} | {row['p95']:.2f} | {row['p99']:.2f} | {ratio:.2f}x |")
    cold_s = metrics.latency_summary(cold)
    print(
        "scope computed cold (after any commit), per agent: "
        f"p50 {cold_s['p50']:.2f} ms, p95 {cold_s['p95']:.2f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
