"""Two users, their agents and their grants, set up through the admin API of an appliance
(real or served in process), for the access tests (tests/rpc/test_access.py in process,
tests/e2e/test_access.py for the faces that need a process).

Alice and bob each import the petstore and own what they import; each has an agent with a
grant on their own toolkit (bob's on one tool only). Alice also installs her toolkit in a
second project, so its names are ambiguous for her own key.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import httpx
import yaml

from tests.support.servers import FIXTURES, Appliance, PetstoreUpstream

if TYPE_CHECKING:
    from tests.support.inprocess import InProcess

SPEC: dict[str, Any] = yaml.safe_load((FIXTURES / "oai-v3.0-petstore.yaml").read_text())
IMPORTS_PER_HOUR = 3
# Access, not spend, is under test: calls to other users' toolkits cost nothing.
ENV = {
    "TOOLSPOKE_IMPORTS_PER_HOUR": str(IMPORTS_PER_HOUR),
    "TOOLSPOKE_DEMO": "0",
    "TOOLSPOKE_DEFAULT_FEE": "0",
}


@dataclasses.dataclass
class World:
    app: Appliance | InProcess
    upstream: PetstoreUpstream
    keys: dict[str, str]  # alice, bob (users), a1, b1 (their agents)
    agents: dict[str, int]
    grants: dict[str, int]


def api(app: Appliance | InProcess, key: str | None = None) -> httpx.Client:
    """An admin-API client acting with ``key`` (the admin key by default)."""
    headers = {"Authorization": f"Bearer {key or app.key}"}
    if isinstance(app, Appliance):
        return httpx.Client(base_url=app.base_url, headers=headers, timeout=30)
    return app.client(headers=headers, timeout=30)


def ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, r.text
    return r.json()


def populate(app: Appliance | InProcess, upstream: PetstoreUpstream) -> World:
    """The two users' world on ``app`` (served with ``ENV``), built through ``/api/v1``."""
    keys: dict[str, str] = {}
    agents: dict[str, int] = {}
    grants: dict[str, int] = {}
    with api(app) as admin:
        for user in ("alice", "bob"):
            uid = ok(admin.post("/api/v1/users", json={"name": user}), 201)["id"]
            keys[user] = ok(admin.post("/api/v1/keys", json={"user_id": uid, "name": "own"}), 201)["key"]
    imports = [("alice", "pets", "default"), ("alice", "pets", "team"), ("bob", "bobpets", "default")]
    for user, slug, project in imports:
        with api(app, keys[user]) as client:
            body = {"slug": slug, "project": project, "spec": SPEC, "base_url": upstream.base_url}
            ok(client.post("/api/v1/toolkits/openapi", json=body), 201)
    for user, agent, slug, tools in (
        ("alice", "a1", "pets", []),
        ("bob", "b1", "bobpets", ["bobpets__listPets"]),
    ):
        with api(app, keys[user]) as client:
            agents[agent] = ok(client.post("/api/v1/agents", json={"name": agent}), 201)["id"]
            keys[agent] = ok(client.post("/api/v1/keys", json={"agent_id": agents[agent]}), 201)["key"]
            grant = {"agent_id": agents[agent], "toolkit": slug, "tools": tools}
            grants[agent] = ok(client.post("/api/v1/grants", json=grant), 201)["id"]
    return World(app, upstream, keys, agents, grants)
