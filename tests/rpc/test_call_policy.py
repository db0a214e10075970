"""The call policy on every path, in process (tests/support/inprocess.py): the official SDK
client on ``/mcp`` and ``/mcp/demo``, the CLI's ``toolspoke call`` through click's runner.

For each guard (a read-only key, a read-only agent, a read-only appliance, deny rules on the
demo toolkit's write and destructive tools) every path refuses ``demo__createNote`` (write)
and ``demo__deleteNote`` (destructive): the bridge runners with an ``isError`` result, a
``tools/call`` by name and ``/mcp/demo`` with ``-32006`` and the reason, ``toolspoke call``
with exit 1. The demo's in-process upstream is wrapped to count what reaches it: nothing
does, nothing is charged or held, and each refusal is one audit row with its reason. Search,
``list_toolkits``, ``describe_tools`` and ``/mcp/demo``'s ``tools/list`` show none of them,
while the read tools still run (and are charged).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from click.testing import CliRunner
from mcp.shared.exceptions import MCPError

from appliance.cli import main
from appliance.ledger import store as ledger_store
from tests.support.access_world import api, ok
from tests.support.accounts import as_key, run
from tests.support.clients import connect
from tests.support.inprocess import InProcess, served_in_process

pytestmark = pytest.mark.inprocess

ENV = {"TOOLSPOKE_DEFAULT_FEE": "1"}
FEE = 1000  # millicredits
READS = {"demo__listNotes", "demo__getNote"}
GUARDED = {"demo__createNote": "run_tool", "demo__deleteNote": "run_destructive_tool"}


@dataclass
class Setup:
    app: InProcess
    user_id: int
    keys: dict[str, str]
    hits: list[str] = field(default_factory=list)  # methods that reached the demo upstream

    def rows(self, prefix: str) -> list[tuple[str, str, str | None, int]]:
        async def read() -> list[Any]:
            await self.app.rt.book.sync()
            async with self.app.rt.db.read() as conn:
                return await conn.all(
                    "SELECT tool, outcome, reason, fee_milli FROM audit_log WHERE key_prefix = ? ORDER BY id",
                    (prefix,),
                )

        return [tuple(r) for r in self.app.run(read())]

    def balance(self) -> int:
        async def read() -> int:
            async with self.app.rt.db.read() as conn:
                return await conn.batch(lambda r: ledger_store.balance(r, self.user_id))

        return self.app.run(read())

    def cli(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        runner = CliRunner(
            env={"TOOLSPOKE_DATA_DIR": str(self.app.data_dir), "TOOLSPOKE_API_KEY": None, **ENV}
        )
        done = runner.invoke(main, list(args), env=env, catch_exceptions=False)
        return done.exit_code, done.stderr


def _prepare(app: InProcess) -> Setup:
    """A user with credit, their own plain and read-only keys, and a read-only agent's key."""
    setup = Setup(app, 0, {})
    app.count_demo_requests(setup.hits, with_target=False)
    with api(app) as admin:
        ok(admin.patch("/api/v1/toolkits/demo/access", json={"visibility": "published", "default": True}))
        uid = setup.user_id = ok(admin.post("/api/v1/users", json={"name": "pat"}), 201)["id"]
        ok(admin.post(f"/api/v1/users/{uid}/credits", json={"amount": 100}), 201)
        for name, body in (("plain", {}), ("ro", {"read_only": True})):
            setup.keys[name] = ok(admin.post("/api/v1/keys", json={"user_id": uid, **body}), 201)["key"]
        agent = ok(admin.post("/api/v1/agents", json={"name": "bot", "user_id": uid}), 201)["id"]
        setup.keys["agent"] = ok(admin.post("/api/v1/keys", json={"agent_id": agent}), 201)["key"]
        shown = ok(admin.patch(f"/api/v1/agents/{agent}", json={"read_only": True}))
        assert shown["read_only"] is True
    return setup


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with served_in_process(tmp_path_factory.mktemp("policy") / "data", env=ENV) as app:
        yield _prepare(app)


@pytest.fixture(scope="module")
def read_only_appliance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with served_in_process(
        tmp_path_factory.mktemp("ro") / "data", env={**ENV, "TOOLSPOKE_READ_ONLY": "1"}
    ) as app:
        yield _prepare(app)


def _every_path_refuses(setup: Setup, key: str, reason: str, cli_env: dict[str, str] | None = None) -> None:
    before, hits = setup.balance(), len(setup.hits)

    async def scenario() -> None:
        async with connect(as_key(setup.app, key)) as client:
            found = await client.call_tool("search_tools", {"query": "note", "limit": 50})
            assert {r["name"] for r in found.structured_content["results"]} == READS
            kits = (await client.call_tool("list_toolkits", {})).structured_content["toolkits"]
            demo = next(k for k in kits if k["toolkit"] == "demo")
            assert {f"demo__{n}" for n in demo["tools"]} == READS
            described = (
                await client.call_tool("describe_tools", {"names": sorted(READS | set(GUARDED))})
            ).structured_content
            assert {t["name"] for t in described["tools"]} == READS
            assert set(described["unknown"]) == set(GUARDED)
            for tool, runner in GUARDED.items():
                result = await client.call_tool(runner, {"tool": tool, "input": {}})
                assert result.is_error and result.meta["toolspoke/reason"] == reason, result
                with pytest.raises(MCPError) as by_name:
                    await client.call_tool(tool, {})
                assert by_name.value.error.code == -32006
                assert by_name.value.error.data["reason"] == reason
            listed = await client.call_tool("use_tool", {"tool": "demo__listNotes", "input": {}})
            assert not listed.is_error
        async with connect(as_key(setup.app, key), "/mcp/demo") as direct:
            assert {t.name for t in (await direct.list_tools()).tools} == {"listNotes", "getNote"}
            for own in ("createNote", "deleteNote"):
                with pytest.raises(MCPError) as refused:
                    await direct.call_tool(own, {})
                assert refused.value.error.code == -32006
                assert refused.value.error.data["reason"] == reason

    run(scenario())
    for tool in GUARDED:  # the CLI, as this key (or, for the appliance, as the operator)
        args = ("call", tool, "--input", "{}") + (() if cli_env else ("--key", key))
        code, err = setup.cli(*args, env=cli_env)
        assert code == 1 and f"error: {tool} is" in err and "nothing was run" in err, err
    assert setup.hits[hits:] == ["GET"]  # the one read call, nothing else
    assert setup.balance() == before - FEE  # the read call's fee, nothing for the refusals
    assert all(t.held_milli == 0 for t in setup.app.rt.book.balances.values())
    rows = setup.rows(key[:12])
    refused = [r for r in rows if r[1] == "blocked"]
    # runner, by name, /mcp/demo and, as this key, `toolspoke call` (the operator's rows are its own)
    paths = 3 if cli_env else 4
    assert sorted(r[0] for r in refused) == sorted([*GUARDED] * paths)
    assert all(r[2] == reason and r[3] == 0 for r in refused)


def test_a_read_only_key_refuses_writes_on_every_path_and_search_shows_none(setup: Setup) -> None:
    _every_path_refuses(setup, setup.keys["ro"], "read_only")


def test_a_read_only_agent_refuses_writes_on_every_path_and_search_shows_none(setup: Setup) -> None:
    _every_path_refuses(setup, setup.keys["agent"], "read_only")


def test_deny_rules_refuse_on_every_path_and_search_shows_none(setup: Setup) -> None:
    with api(setup.app) as admin:
        for kind in ("write", "destructive"):
            body = {"kind": kind, "action": "deny"}
            ok(admin.put("/api/v1/toolkits/demo/policy", json=body))
        try:
            _every_path_refuses(setup, setup.keys["plain"], "policy_denied")
        finally:
            for kind in ("write", "destructive"):
                ok(admin.put("/api/v1/toolkits/demo/policy", json={"kind": kind, "action": None}))

    # Lifted: the plain key sees and runs the write tool again.
    async def scenario() -> None:
        async with connect(as_key(setup.app, setup.keys["plain"])) as client:
            found = await client.call_tool("search_tools", {"query": "note", "limit": 50})
            assert {r["name"] for r in found.structured_content["results"]} == READS | set(GUARDED)

    run(scenario())


def test_a_read_only_appliance_refuses_writes_on_every_path_and_search_shows_none(
    read_only_appliance: Setup,
) -> None:
    _every_path_refuses(
        read_only_appliance, read_only_appliance.keys["plain"], "read_only", {"TOOLSPOKE_READ_ONLY": "1"}
    )


def test_the_cli_call_as_the_operator_runs_writes_when_nothing_guards(setup: Setup) -> None:
    code, err = setup.cli("call", "demo__createNote", "--input", '{"body": {"title": "t"}}')
    assert code == 0, err
