"""The console's pages at size: server time per page (p50, p95) and page weight.

Run from the repo root: ``.venv/bin/python tests/bench/console_pages.py``.

Two catalogues, each seeded through the normal store functions (``tests/support/worlds.py``:
the rows, tool states and search index an import writes): 10,000 tools over 200 toolkits
(one in ten tools pending), and 1,000 toolkits of 10 tools. The app runs in this process
(``tests/support/inprocess.py``: the same Sanic app as ``serve``, no socket), so a request's
time is the server's own: routing, session lookup, the operation, rendering. Each page is
asked ``ROUNDS`` times by a signed-in admin (every toolkit) and by a user (their own
twentieth); the figures are per request: wall time, and the CPU time of this process (the
server's work and the in-process client's, which a loaded machine does not inflate).
Target (issue 18): every page within 50 ms.

At 1,000 toolkits (every one published), an agent of the admin is offered every one of
them: its page ("Add tool" lists at most ``agent_pages.GRANTABLE_MAX``, with a search) is
timed whole, searched, and as the fragment the search swaps in.

The agent, user, search, overview and settings pages are measured over the first catalogue
with 50 agents (five per user, each granted three toolkits) and ``AUDIT_ROWS`` audit rows
spread over the last 30 days (one call in ten not ok, three in ten paid), the overview's
realistic log: its sums read migration 18's covering index.
"""

from __future__ import annotations

import random
import re
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance.search import metrics
from tests.support import worlds
from tests.support.inprocess import InProcess, served_in_process
from tests.support.worlds import GrantSpec, KitSpec, World

ROUNDS = 60
USERS = 10
AGENTS_PER_USER = 5
AUDIT_ROWS = 100_000
OUTCOMES = ["ok"] * 18 + ["upstream_error", "quota"]


def world(kits: int, tools_per_kit: int) -> World:
    specs = [
        KitSpec(
            f"kit{k:04d}",
            f"project{k % 4}",
            owner=k % USERS,
            visibility="published" if k % 10 == 0 else "private",
            default=k % 40 == 1,
            active=[i % 10 != 9 for i in range(tools_per_kit)],  # one in ten pending
        )
        for k in range(kits)
    ]
    agents = [user for user in range(USERS) for _ in range(AGENTS_PER_USER)]
    grants = [
        GrantSpec(agent=a, kit=(user + USERS * g) % kits, tools=[0] if g == 2 else [])
        for a, user in enumerate(agents)
        for g in range(3)
    ]
    return World(users=[False] * USERS, agents=agents, kits=specs, grants=grants)


async def audit_log(app: InProcess, built: worlds.Built, world: World, rows: int) -> None:
    """``rows`` calls over the last 30 days, newest last, as the audit log stores them."""
    rng = random.Random(18)
    now = time.time()
    batch = []
    for i in range(rows):
        agent = rng.randrange(len(built.agent_ids))
        kit = rng.randrange(len(built.kit_ids))
        user = world.agents[agent]
        outcome = rng.choice(OUTCOMES)
        fee = 500 if outcome == "ok" and rng.random() < 0.3 else 0
        at = now - 30 * 86_400 * (1 - i / rows)
        spec = world.kits[kit]
        batch.append(
            (
                at,
                built.user_ids[user],
                f"u{user}",
                built.agent_ids[agent],
                f"a{agent}",
                built.kit_ids[kit],
                spec.slug,
                spec.project,
                spec.tool_name(rng.randrange(len(spec.active))),
                outcome,
                fee,
            )
        )
    async with app.rt.db.write() as tx:
        await tx.run_many(
            "INSERT INTO audit_log (at, user_id, user_name, agent_id, agent_name, toolkit_id, toolkit,"
            " project, tool, outcome, fee_milli) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            batch,
        )


def signed_in(app: InProcess, key: str) -> httpx.Client:
    client = app.client(timeout=60)
    form = client.get("/console/sign-in").text
    token = re.search(r'name="csrf" value="([^"]+)"', form)
    assert token is not None
    done = client.post("/console/sign-in", data={"key": key, "csrf": token.group(1)})
    assert done.status_code == 303, done.text[:200]
    return client


def timed(client: httpx.Client, path: str, params: dict[str, str]) -> tuple[list[float], list[float], int]:
    headers = {"HX-Request": "true"} if params.pop("hx", None) else {}
    client.get(path, params=params, headers=headers)  # warm: templates compiled, memo filled
    times, cpu, size = [], [], 0
    for _ in range(ROUNDS):
        started, used = time.perf_counter(), time.process_time()
        got = client.get(path, params=params, headers=headers)
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - used) * 1000)
        assert got.status_code == 200, (got.status_code, got.text[:200])
        size = len(got.content)
    return times, cpu, size


def pages(kits: int, tools_per_kit: int, *, more: bool = False) -> None:
    env = {"TOOLSPOKE_HEALTH_INTERVAL_S": "0"}
    with tempfile.TemporaryDirectory() as tmp, served_in_process(Path(tmp) / "data", env=env) as app:
        started = time.perf_counter()
        seeded_world = world(kits, tools_per_kit)
        built = app.run(worlds.build(app.rt, seeded_world), timeout=600)
        if more:
            app.run(audit_log(app, built, seeded_world, AUDIT_ROWS), timeout=600)
        seeded = time.perf_counter() - started
        total = kits * tools_per_kit
        print(f"\n{kits} toolkits x {tools_per_kit} tools ({total:,} tools), seeded in {seeded:.1f} s")
        admin, user = signed_in(app, app.key), signed_in(app, built.user_keys[3])
        one = f"/console/toolkits/project{3 % 4}/kit0003"
        app.run(health_history(app, built.kit_ids[3]))
        cases = [
            ("cards, page 1 (admin)", admin, "/console/toolkits", {}),
            ("cards, page 5 (admin)", admin, "/console/toolkits", {"page": "5"}),
            ("cards, last page (admin)", admin, "/console/toolkits", {"page": str(-(-(kits + 1) // 24))}),
            ("cards, search 'kit01' (admin)", admin, "/console/toolkits", {"q": "kit01"}),
            (
                "cards, filtered project+status",
                admin,
                "/console/toolkits",
                {"project": "project1", "health": "active"},
            ),
            ("cards fragment (htmx)", admin, "/console/toolkits", {"q": "kit0", "hx": "1"}),
            ("cards, page 1 (user)", user, "/console/toolkits", {}),
            (f"toolkit page ({tools_per_kit} tools, 50 health transitions)", user, one, {}),
            (
                "toolkit page, history by tool and time",
                user,
                one,
                {"tool": "kit0003__t1", "since": "2026-01-01T00:00", "until": "2999-01-01T00:00"},
            ),
            ("toolkit page (admin)", admin, one, {}),
            ("import page", user, "/console/import", {}),
            ("import page, .mcp.json form", user, "/console/import", {"mode": "json"}),
        ]
        if kits >= 1000:
            # an agent of the admin reaches every toolkit: "Add tool" offers GRANTABLE_MAX of
            # them, with a search, however many there are
            reaching = app.run(admin_agent(app))
            cases += [
                (f"an admin's agent ({kits:,} toolkits to offer)", admin, f"/console/agents/{reaching}", {}),
                ("  the same, searched 'kit09'", admin, f"/console/agents/{reaching}", {"kit": "kit09"}),
                (
                    "  its Add tool fragment (htmx)",
                    admin,
                    f"/console/agents/{reaching}",
                    {"kit": "kit0", "hx": "1"},
                ),
            ]
        if more:
            agent = built.agent_ids[3 * AGENTS_PER_USER]
            cases += [
                ("agents (admin, 50)", admin, "/console/agents", {}),
                ("agents (user)", user, "/console/agents", {}),
                ("an agent (3 grants, 200 toolkits to offer)", admin, f"/console/agents/{agent}", {}),
                ("a grant's tools", user, f"/console/agents/{agent}/grants/{grant_of(app, agent)}", {}),
                ("users (admin)", admin, "/console/users", {}),
                ("a user's page", user, f"/console/users/{built.user_ids[3]}", {}),
                ("search playground (admin)", admin, "/console/search", {"q": "widget operation 7"}),
                (
                    "search as an agent",
                    admin,
                    "/console/search",
                    {"q": "widget operation 7", "agent": str(agent)},
                ),
                (f"overview (admin, {AUDIT_ROWS:,} calls)", admin, "/console/overview", {}),
                ("overview (user)", user, "/console/overview", {}),
                ("settings", admin, "/console/settings", {}),
            ]
        print("| page | p50 ms | p95 ms | max ms | CPU p50 ms | bytes |\n|---|---|---|---|---|---|")
        for name, client, path, params in cases:
            times, cpu, size = timed(client, path, params)
            p, c = metrics.latency_summary(times), metrics.latency_summary(cpu)
            print(
                f"| {name} | {p['p50']:.1f} | {p['p95']:.1f} | {max(times):.1f} | {c['p50']:.1f} | {size:,} |"
            )
        dry_run(app, user)


async def health_history(app: InProcess, kit_id: int) -> None:
    """A full health history (50 transitions) for the toolkit whose page is timed."""
    from appliance.catalogue import store

    for i in range(store.HEALTH_HISTORY):
        async with app.rt.db.write() as tx:
            await store.set_toolkit_health(tx, kit_id, "broken" if i % 2 else "active", f"check {i}")


def dry_run(app: InProcess, client: httpx.Client) -> None:
    """A dry run of a pasted 3-operation spec (parse, convert, screen; nothing stored)."""
    page = client.get("/console/import").text
    token = re.search(r'name="csrf" value="([^"]+)"', page)
    assert token is not None
    spec = (
        Path(__file__).resolve().parents[1] / "fixtures" / "openapi" / "oai-v2.0-petstore.json"
    ).read_text()
    form = {"csrf": token.group(1), "slug": "bench", "spec_text": spec}
    times, cpu = [], []
    for _ in range(ROUNDS // 2):
        started, used = time.perf_counter(), time.process_time()
        got = client.post("/console/import/openapi", data=form)
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - used) * 1000)
        assert got.status_code == 200, got.text[-300:]
    p, c = metrics.latency_summary(times), metrics.latency_summary(cpu)
    figures = f"{p['p50']:.1f} | {p['p95']:.1f} | {max(times):.1f} | {c['p50']:.1f} | {len(got.content):,}"
    print(f"| import dry run (pasted petstore, POST) | {figures} |")


async def admin_agent(app: InProcess) -> int:
    """A new agent of the admin, with one grant, whose user reaches every toolkit: each is
    published first (an admin's reach is the platform's own, the published and the defaults)."""
    from appliance.gateway.admin import grants, people

    async with app.rt.db.write() as tx:
        await tx.run("UPDATE toolkits SET visibility = 'published'")
    admin = await worlds.principal(app.rt, app.key)
    made = await people.create_agent(app.rt, admin, "bench-admin-agent")
    await grants.create_grant(app.rt, admin, made["id"], "kit0003", project="project3")
    return int(made["id"])


def grant_of(app: InProcess, agent_id: int) -> int:
    async def first() -> int:
        async with app.rt.db.read() as conn:
            row = await conn.one("SELECT min(id) AS id FROM grants WHERE agent_id = ?", (agent_id,))
        return int(row["id"])

    return app.run(first())


def assets() -> None:
    static = Path(__file__).resolve().parents[2] / "appliance" / "web" / "console" / "static"
    sizes = {p.name: p.stat().st_size for p in sorted(static.iterdir()) if p.suffix in (".js", ".css")}
    print(
        "\nstatic files (fetched once, cached immutable): "
        + ", ".join(f"{n} {s:,} B" for n, s in sizes.items())
    )


if __name__ == "__main__":
    pages(200, 50, more=True)
    pages(1000, 10)
    assets()
