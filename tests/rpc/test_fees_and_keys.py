"""Fees per kind and narrower keys (issue 20 items 5 and 6), in process (tests/support/inprocess.py):
the admin API and the CLI set them, the official SDK client on ``/mcp`` sees and pays them.

- Fees: the demo toolkit's read, write and destructive tools and one tool of its own each cost
  their most specific fee; search and describe show an agent each tool's cost and the calls
  its credit leaves, its owner (who calls free) nothing; concurrent calls of every kind are
  charged exactly their fees, the ledger equal to the audit, nothing left held.
- Narrower keys: a key narrowed to one tool with a budget of its own sees and runs that tool
  only, is refused once its budget is spent (its user's credit untouched beyond it), and
  lists what it spent; a narrowing wider than its agent is refused (403 on ``scope``); a
  narrowed key manages nothing; an expired key is refused 401 with ``key_expired``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
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

FEES = {"demo__listNotes": 1000, "demo__getNote": 250, "demo__createNote": 2000, "demo__deleteNote": 5000}
ARGS: dict[str, dict[str, Any]] = {
    "demo__listNotes": {},
    "demo__getNote": {"noteId": 1},
    "demo__createNote": {"body": {"title": "t"}},
    "demo__deleteNote": {"noteId": 999},
}


class Setup:
    def __init__(self, app: InProcess) -> None:
        self.app = app
        with api(app) as admin:
            ok(admin.patch("/api/v1/toolkits/demo/access", json={"visibility": "published", "default": True}))
            self.user = ok(admin.post("/api/v1/users", json={"name": "pat"}), 201)["id"]
            ok(admin.post(f"/api/v1/users/{self.user}/credits", json={"amount": 100}), 201)
            self.agent = ok(admin.post("/api/v1/agents", json={"name": "bot", "user_id": self.user}), 201)[
                "id"
            ]
            self.agent_key = ok(admin.post("/api/v1/keys", json={"agent_id": self.agent}), 201)["key"]
            self.user_key = ok(admin.post("/api/v1/keys", json={"user_id": self.user}), 201)["key"]

    def balance(self) -> int:
        async def read() -> int:
            async with self.app.rt.db.read() as conn:
                return await conn.batch(lambda r: ledger_store.balance(r, self.user))

        return self.app.run(read())

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        async def read() -> list[Any]:
            await self.app.rt.book.sync()
            async with self.app.rt.db.read() as conn:
                return await conn.all(sql, params)

        return [tuple(r) for r in self.app.run(read())]

    def cli(self, *args: str) -> tuple[int, str, str]:
        runner = CliRunner(env={"TOOLSPOKE_DATA_DIR": str(self.app.data_dir), "TOOLSPOKE_API_KEY": None})
        done = runner.invoke(main, list(args), catch_exceptions=False)
        return done.exit_code, done.stdout, done.stderr


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    env = {"TOOLSPOKE_DEFAULT_FEE": "1"}
    with served_in_process(tmp_path_factory.mktemp("fees") / "data", env=env) as app:
        yield Setup(app)


def _set_fees(setup: Setup) -> None:
    with api(setup.app) as admin:
        body = {"kind_fees": {"write": 2, "destructive": 5}, "tool_fees": {"getNote": 0.25}}
        shown = ok(admin.put("/api/v1/toolkits/demo/quota", json=body))
    assert shown["kind_fees"] == {"destructive": 5, "write": 2}
    assert shown["tool_fees"] == {"demo__getNote": 0.25}
    assert shown["fee"] == 1  # the default still, since only the fees per kind and tool were set


def test_search_and_describe_show_each_tool_s_cost_and_the_calls_left_and_calls_pay_exactly_that(
    setup: Setup,
) -> None:
    _set_fees(setup)
    before = setup.balance()

    async def scenario() -> None:
        async with connect(as_key(setup.app, setup.agent_key)) as client:
            found = await client.call_tool("search_tools", {"query": "note", "limit": 10})
            results = {r["name"]: r for r in found.structured_content["results"]}
            assert set(results) == set(FEES)
            for name, fee in FEES.items():
                assert results[name]["cost"] == fee / 1000
                assert results[name]["left"] == before // fee  # the credit is the only ceiling
                added = {k: results[name][k] for k in ("cost", "left")}
                assert len(json.dumps(added, separators=(",", ":"))) <= 28  # the answer's budget
            described = await client.call_tool("describe_tools", {"names": ["demo__deleteNote"]})
            [tool] = described.structured_content["tools"]
            assert (tool["cost"], tool["left"]) == (5, before // 5000)
            # Twelve calls of each kind at once: each pays exactly its tool's fee.
            calls = [n for n in FEES for _ in range(12)]
            done = await asyncio.gather(*(client.call_tool(n, ARGS[n]) for n in calls))
            assert len(done) == len(calls)
        async with connect(as_key(setup.app, setup.user_key)) as owner_free:
            mine = await owner_free.call_tool("search_tools", {"query": "note", "limit": 10})
            assert all("cost" in r for r in mine.structured_content["results"])  # not their toolkit

    run(scenario())
    charged = dict(
        setup.query(
            "SELECT a.tool, group_concat(DISTINCT a.fee_milli) FROM audit_log a JOIN ledger_entries e"
            " ON e.audit_id = a.id AND e.kind = 'charge' WHERE a.key_prefix = ? GROUP BY a.tool",
            (setup.agent_key[:12],),
        )
    )
    assert charged == {name: str(fee) for name, fee in FEES.items()}
    ((total, audited),) = setup.query(
        "SELECT -sum(e.amount_milli), sum(a.fee_milli) FROM ledger_entries e JOIN audit_log a"
        " ON a.id = e.audit_id WHERE e.kind = 'charge' AND a.key_prefix = ?",
        (setup.agent_key[:12],),
    )
    assert total == audited == 12 * sum(FEES.values())
    assert setup.balance() == before - total
    assert all(t.held_milli == 0 for t in setup.app.rt.book.balances.values())


def test_the_owner_in_person_sees_no_cost_and_the_cli_sets_fees_per_kind_and_tool(setup: Setup) -> None:
    async def scenario() -> list[dict[str, Any]]:
        async with connect(as_key(setup.app, setup.app.key)) as admin:  # the platform's toolkit: theirs
            found = await admin.call_tool("search_tools", {"query": "note", "limit": 10})
            return found.structured_content["results"]

    assert not any("cost" in r or "left" in r for r in run(scenario()))
    args = ["quota", "set", "demo", "--kind-fee", "read=0.5", "--tool-fee", "getNote=none", "--json"]
    code, out, err = setup.cli(*args)
    assert code == 0, err
    shown = json.loads(out)
    assert shown["kind_fees"] == {"destructive": 5, "read": 0.5, "write": 2} and shown["tool_fees"] == {}
    code, _, err = setup.cli("quota", "set", "demo", "--kind-fee", "sideways=1")
    assert code != 0 and "kind_fees" in err
    with api(setup.app) as admin:
        refused = admin.put("/api/v1/toolkits/demo/quota", json={"tool_fees": {"noSuchTool": 1}})
        assert refused.status_code == 404 and refused.json()["error"]["field"] == "tool_fees"
        ok(admin.put("/api/v1/toolkits/demo/quota", json={"kind_fees": {"read": None}}))


def test_a_narrowed_key_with_a_budget_sees_runs_and_spends_only_what_it_was_given(setup: Setup) -> None:
    with api(setup.app) as admin:
        ok(admin.post(f"/api/v1/users/{setup.user}/credits", json={"amount": 100}), 201)  # not the ceiling
        body = {
            "agent_id": setup.agent,
            "scope": [{"toolkit": "demo", "tools": ["listNotes"]}],
            "budget": 2.5,
        }
        made = ok(admin.post("/api/v1/keys", json=body), 201)
    key = made["key"]
    assert made["scope"] == [{"toolkit": "demo", "project": "default", "tools": ["demo__listNotes"]}]
    assert (made["budget"], made["spent"]) == (2.5, 0)
    fee = setup.app.run(setup.app.rt.book.price(1, toolkit="demo")).fee_for("demo__listNotes", "read")
    before = setup.balance()

    async def scenario() -> None:
        async with connect(as_key(setup.app, key)) as client:
            found = await client.call_tool("search_tools", {"query": "note", "limit": 10})
            [only] = found.structured_content["results"]
            assert only["name"] == "demo__listNotes" and only["left"] == 2500 // fee
            with pytest.raises(MCPError) as unseen:
                await client.call_tool("demo__getNote", {"noteId": 1})
            assert unseen.value.error.data["reason"] == "tool_not_found"
            for _ in range(2500 // fee):
                assert not (await client.call_tool("demo__listNotes", {})).is_error
            with pytest.raises(MCPError) as spent:
                await client.call_tool("demo__listNotes", {})
            assert spent.value.error.data["window"] == "key_budget"
            again = await client.call_tool("search_tools", {"query": "note", "limit": 10})
            assert again.structured_content["results"][0]["left"] == 0

    run(scenario())
    assert setup.balance() == before - (2500 // fee) * fee
    with api(setup.app) as admin:
        listed = ok(admin.get(f"/api/v1/keys?agent_id={setup.agent}"))["keys"]
    assert next(k for k in listed if k["prefix"] == made["prefix"])["spent"] == (2500 // fee) * fee / 1000


def test_a_narrowing_wider_than_the_agent_is_refused_and_a_narrowed_key_manages_nothing(setup: Setup) -> None:
    with api(setup.app) as admin:
        other = ok(admin.post("/api/v1/agents", json={"name": "out", "user_id": setup.user}), 201)["id"]
        ok(admin.post("/api/v1/grants", json={"agent_id": other, "toolkit": "demo", "enabled": False}), 201)
        for scope in ([{"toolkit": "demo"}], [{"toolkit": "nowhere"}]):
            refused = admin.post("/api/v1/keys", json={"agent_id": other, "scope": scope})
            assert refused.status_code == 403 and refused.json()["error"]["field"] == "scope", refused.text
        assert ok(admin.get(f"/api/v1/keys?agent_id={other}"))["keys"] == []  # nothing stored
        narrow = ok(
            admin.post("/api/v1/keys", json={"user_id": setup.user, "scope": [{"toolkit": "demo"}]}), 201
        )
    with api(setup.app, narrow["key"]) as narrowed:
        assert narrowed.post("/api/v1/keys", json={"user_id": setup.user}).status_code == 403
        assert narrowed.post("/api/v1/agents", json={"name": "x", "user_id": setup.user}).status_code == 403


def test_the_cli_issues_a_narrowed_key_and_an_expired_key_is_refused_with_its_reason(setup: Setup) -> None:
    args = [
        "keys",
        "--json",
        "create",
        "--user",
        "pat",
        "--agent",
        str(setup.agent),
        "--scope",
        "default/demo:getNote",
    ]
    code, out, err = setup.cli(*args, "--budget", "1", "--expires", "2001-01-01T00:00:00Z")
    assert code == 0, err
    made = json.loads(out)
    assert made["scope"] == [{"toolkit": "demo", "project": "default", "tools": ["demo__getNote"]}]
    assert made["budget"] == 1 and made["expires_at"].startswith("2001-01-01")
    code, out, _ = setup.cli("keys")
    assert f"{made['prefix']}" in out and "only demo:demo__getNote" in out and "budget 0 of 1" in out
    with setup.app.mcp_client(made["key"]) as client:
        answer = client.post(setup.app.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert answer.status_code == 401
    error = answer.json()["error"]
    assert error["data"]["reason"] == "key_expired" and "expired at 2001-01-01" in error["message"]
    with api(setup.app, made["key"]) as expired:
        refused = expired.get("/api/v1/keys")
    assert refused.status_code == 401 and refused.json()["error"]["reason"] == "key_expired"


def test_a_keys_budget_and_expiry_change_after_it_was_made_and_what_it_spent_still_counts(
    setup: Setup,
) -> None:
    with api(setup.app) as admin:
        made = ok(admin.post("/api/v1/keys", json={"agent_id": setup.agent, "budget": 1}), 201)
        prefix, key = made["prefix"], made["key"]
        fee = setup.app.run(setup.app.rt.book.price(1, toolkit="demo")).fee_for("demo__listNotes", "read")
        calls = 1000 // fee

        async def spend(n: int) -> None:
            async with connect(as_key(setup.app, key)) as client:
                for _ in range(n):
                    assert not (await client.call_tool("demo__listNotes", {})).is_error
                with pytest.raises(MCPError) as over:
                    await client.call_tool("demo__listNotes", {})
                assert over.value.error.data["window"] == "key_budget"

        run(spend(calls))
        raised = ok(admin.patch(f"/api/v1/keys/{prefix}", json={"budget": 2}))
        assert (raised["budget"], raised["spent"]) == (2, calls * fee / 1000)
        run(spend(calls))  # the difference only: the first credit stays spent
        for bad, field in (({"budget": -1}, "budget"), ({"expires_at": "soon"}, "expires_at"), ({}, "body")):
            refused = admin.patch(f"/api/v1/keys/{prefix}", json=bad)
            assert refused.status_code == 422 and refused.json()["error"]["field"] == field, refused.text
        assert admin.patch(f"/api/v1/keys/{prefix}", json={"name": "x"}).status_code == 422  # not changeable
        past = ok(admin.patch(f"/api/v1/keys/{prefix}", json={"expires_at": "2001-01-01T00:00:00Z"}))
        assert past["expires_at"].startswith("2001-01-01") and past["budget"] == 2  # one change at a time
    with setup.app.mcp_client(key) as client:
        answer = client.post(setup.app.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert answer.status_code == 401 and answer.json()["error"]["data"]["reason"] == "key_expired"
    code, out, err = setup.cli("keys", "--json", "set", prefix, "--expires", "never", "--budget", "none")
    assert code == 0, err
    assert (json.loads(out)["expires_at"], json.loads(out)["budget"]) == (None, None)
    assert setup.cli("keys", "set", prefix)[0] == 2
    with setup.app.mcp_client(key) as client:  # past authentication: it asks for a session now
        answer = client.post(setup.app.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert answer.status_code == 400 and answer.json()["error"]["data"]["field"] == "mcp-session-id", (
        answer.text
    )
