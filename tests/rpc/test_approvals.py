"""Approvals out of band, in process (tests/support/inprocess.py): the official SDK client on
``/mcp`` (a bridge runner, a call by name) and ``/mcp/demo``, the admin API, the CLI through
click's runner, and the console's queue over HTTP.

The demo toolkit's destructive tools need approval (approver: the toolkit's owner or an
admin) and ``demo__createNote`` too (approver ``user``: the user the agent acts for). The
demo's in-process upstream is wrapped to count what reaches it: a call waiting for approval
sends nothing and charges nothing; once approved, the retry runs exactly once; the refused
retries send nothing. The real browser's view is ``tests/e2e/test_console_approvals.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from click.testing import CliRunner

from appliance.cli import main
from appliance.ledger import store as ledger_store
from tests.support.access_world import api, ok
from tests.support.accounts import as_key, run
from tests.support.clients import connect
from tests.support.inprocess import InProcess, served_in_process
from tests.web.test_console import csrf_of, signed_in

pytestmark = pytest.mark.inprocess

ENV = {"TOOLSPOKE_DEFAULT_FEE": "1"}
FEE = 1000
HOSTILE = "<script>alert(1)</script>"


@dataclass
class Setup:
    app: InProcess
    user_id: int
    keys: dict[str, str]
    hits: list[str] = field(default_factory=list)

    def balance(self) -> int:
        async def read() -> int:
            async with self.app.rt.db.read() as conn:
                return await conn.batch(lambda r: ledger_store.balance(r, self.user_id))

        return self.app.run(read())

    def cli(self, *args: str) -> tuple[int, str]:
        runner = CliRunner(
            env={"TOOLSPOKE_DATA_DIR": str(self.app.data_dir), "TOOLSPOKE_API_KEY": None, **ENV}
        )
        done = runner.invoke(main, list(args), catch_exceptions=False)
        return done.exit_code, done.stdout + done.stderr

    def reasons(self) -> list[str | None]:
        async def read() -> list[Any]:
            await self.app.rt.book.sync()
            async with self.app.rt.db.read() as conn:
                return await conn.all("SELECT reason FROM audit_log WHERE tool LIKE 'demo__%' ORDER BY id")

        return [r[0] for r in self.app.run(read())]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with served_in_process(tmp_path_factory.mktemp("approvals") / "data", env=ENV) as app:
        s = Setup(app, 0, {})
        app.count_demo_requests(s.hits)
        with api(app) as admin:
            ok(admin.patch("/api/v1/toolkits/demo/access", json={"visibility": "published", "default": True}))
            ok(admin.put("/api/v1/toolkits/demo/policy", json={"kind": "destructive", "action": "approve"}))
            rule = {"tool": "createNote", "action": "approve", "approver": "user"}
            shown = ok(admin.put("/api/v1/toolkits/demo/policy", json=rule))
            assert shown["rules"]["tools"] == {"demo__createNote": "approve"}
            assert shown["approvers"]["tools"] == {"demo__createNote": "user"}
            uid = s.user_id = ok(admin.post("/api/v1/users", json={"name": "pat"}), 201)["id"]
            ok(admin.post(f"/api/v1/users/{uid}/credits", json={"amount": 100}), 201)
            s.keys["pat"] = ok(admin.post("/api/v1/keys", json={"user_id": uid}), 201)["key"]
            for name in ("bot", "other"):
                agent = ok(admin.post("/api/v1/agents", json={"name": name, "user_id": uid}), 201)["id"]
                s.keys[name] = ok(admin.post("/api/v1/keys", json={"agent_id": agent}), 201)["key"]
        yield s


def pending(result: Any) -> dict[str, Any]:
    assert result.is_error, result
    meta = result.meta
    assert meta["toolspoke/reason"] == "approval_required" and meta["toolspoke/code"] == -32007, meta
    info: dict[str, Any] = meta["toolspoke/approval"]
    assert info["url"] == f"/console/approvals#{info['id']}" and info["id"] in result.content[0].text
    return info


def test_a_destructive_call_waits_is_approved_through_the_api_and_its_retry_runs_once(setup: Setup) -> None:
    before, hits = setup.balance(), len(setup.hits)
    args = {"noteId": 41}

    async def ask() -> tuple[dict[str, Any], dict[str, Any]]:
        async with connect(as_key(setup.app, setup.keys["bot"])) as client:
            first = pending(
                await client.call_tool("run_destructive_tool", {"tool": "demo__deleteNote", "input": args})
            )
            by_name = pending(await client.call_tool("demo__deleteNote", args))
        async with connect(as_key(setup.app, setup.keys["bot"]), "/mcp/demo") as direct:
            own = pending(await direct.call_tool("deleteNote", args))
        assert first["id"] == by_name["id"] == own["id"]  # one call asked three ways: one approval
        return first, own

    info, _ = run(ask())
    assert len(setup.hits) == hits and setup.balance() == before
    with api(setup.app) as admin:
        queue = ok(admin.get("/api/v1/approvals"))["approvals"]
        mine = next(a for a in queue if a["id"] == info["id"])
        assert (
            mine["arguments"] == '{"noteId":41}' and mine["fee"] == 1 and mine["asked_by"]["agent"] == "bot"
        )
        with api(setup.app, setup.keys["pat"]) as pat:  # the owner-or-admin rule: not pat's to decide
            assert pat.post(f"/api/v1/approvals/{info['id']}/approve").status_code == 404
        decided = ok(admin.post(f"/api/v1/approvals/{info['id']}/approve"))
        assert decided["state"] == "approved"
        assert admin.post(f"/api/v1/approvals/{info['id']}/deny").status_code == 409

    async def retry() -> None:
        async with connect(as_key(setup.app, setup.keys["other"])) as other:  # another principal
            refused = await other.call_tool(
                "run_destructive_tool", {"tool": "demo__deleteNote", "input": args, "approval": info["id"]}
            )
            assert refused.is_error and refused.meta["toolspoke/reason"] == "approval_unknown"
        async with connect(as_key(setup.app, setup.keys["bot"])) as client:
            changed = await client.call_tool(
                "demo__deleteNote", {"noteId": 42}, meta={"toolspoke/approval": info["id"]}
            )
            assert changed.meta["toolspoke/reason"] == "approval_mismatch"
            ran = await client.call_tool(
                "run_destructive_tool", {"tool": "demo__deleteNote", "input": args, "approval": info["id"]}
            )
            # the demo has no note 41: the upstream's 404 is the answer, but the call ran
            assert not str(ran.meta.get("toolspoke/reason", "")).startswith("approval_"), ran
        async with connect(as_key(setup.app, setup.keys["bot"]), "/mcp/demo") as direct:
            again = await direct.call_tool("deleteNote", args, meta={"toolspoke/approval": info["id"]})
            assert again.is_error and again.meta["toolspoke/reason"] == "approval_used"

    run(retry())
    assert setup.hits[hits:] == ["DELETE /demo/api/notes/41"]  # exactly once
    assert setup.balance() == before - FEE
    reasons = setup.reasons()
    assert reasons[-5] == "approval_granted" and reasons[-4:-2] == ["approval_unknown", "approval_mismatch"]
    assert reasons[-1] == "approval_used"  # the second use, refused


def test_the_cli_lists_approves_and_a_retry_with_the_same_idempotency_key_runs_it(setup: Setup) -> None:
    hits = len(setup.hits)
    args = {"noteId": 7}
    key = {"toolspoke/idempotencyKey": "delete-7"}

    async def ask() -> dict[str, Any]:
        async with connect(as_key(setup.app, setup.keys["bot"])) as client:
            return pending(await client.call_tool("demo__deleteNote", args, meta=key))

    info = run(ask())
    code, out = setup.cli("approvals", "list")
    assert code == 0 and info["id"] in out and '{"noteId":7}' in out, out
    code, out = setup.cli("approvals", "approve", info["id"])
    assert code == 0 and "approved" in out, out
    code, out = setup.cli("approvals", "deny", info["id"])
    assert code == 1 and "not pending" in out, out

    async def retry() -> None:
        async with connect(as_key(setup.app, setup.keys["bot"])) as client:
            ran = await client.call_tool("demo__deleteNote", args, meta=key)
            assert ran.meta.get("toolspoke/reason") not in ("approval_required", "approval_used"), ran
            replayed = await client.call_tool("demo__deleteNote", args, meta=key)  # the key's stored result
            assert replayed.meta.get("toolspoke/idempotentReplay") is True

    run(retry())
    assert setup.hits[hits:] == ["DELETE /demo/api/notes/7"]


def test_the_console_queue_shows_the_call_escaped_and_decides_with_csrf_by_the_rule(setup: Setup) -> None:
    hits = len(setup.hits)
    args = {"body": {"title": HOSTILE, "tags": ["b", "a"]}}

    async def ask() -> dict[str, Any]:
        async with connect(as_key(setup.app, setup.keys["bot"])) as client:
            return pending(await client.call_tool("run_tool", {"tool": "demo__createNote", "input": args}))

    info = run(ask())
    client, csrf = signed_in(setup.app, setup.keys["pat"])  # the user the agent acts for: the rule's approver
    page = client.get("/console/approvals")
    assert page.status_code == 200 and f'id="{info["id"]}"' in page.text
    assert HOSTILE not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    action = f"/console/approvals/{info['id']}/approve"
    assert action in page.text
    assert client.post(action, data={"csrf": "wrong"}).status_code == 403
    done = client.post(action, data={"csrf": csrf})
    assert done.status_code == 303 and done.headers["location"] == "/console/approvals?done=approved"
    shown = client.get("/console/approvals?state=approved").text
    assert re.search(rf'id="{info["id"]}"', shown) and "by pat" in shown
    assert csrf_of(client.get("/console/approvals")) == csrf

    async def retry() -> None:
        async with connect(as_key(setup.app, setup.keys["bot"])) as client:
            ran = await client.call_tool(
                "run_tool", {"tool": "demo__createNote", "input": args, "approval": info["id"]}
            )
            assert not ran.is_error, ran

    run(retry())
    assert [h.split(" ")[0] for h in setup.hits[hits:]] == ["POST"]


def test_metrics_count_the_approval_events(setup: Setup) -> None:
    with api(setup.app) as admin:
        text = admin.get("/metrics").text
    for event in ("requested", "granted", "used"):
        assert re.search(rf'toolspoke_approvals_total\{{event="{event}"\}} [1-9]', text), event
