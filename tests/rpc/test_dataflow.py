"""The data-flow guard in process (tests/support/inprocess.py): the official SDK client on
``/mcp`` through the bridge's runners, the admin API and the CLI through click's runner.

The demo toolkit's tools are labelled through the API: ``demo__getNote`` reads private data,
``demo__listNotes`` brings in untrusted content, ``demo__createNote`` communicates outside.
The demo's in-process upstream is wrapped to count what reaches it: an outward call the guard
holds sends nothing and charges nothing.
"""

from __future__ import annotations

import json
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
from tests.web.test_console import signed_in

pytestmark = pytest.mark.inprocess

ENV = {"TOOLSPOKE_DEFAULT_FEE": "1"}
PRIVATE, UNTRUSTED, OUTWARD = "demo__getNote", "demo__listNotes", "demo__createNote"
NOTE = {"body": {"title": "to the world"}}


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

    def last_row(self) -> tuple[str, str | None, str | None]:
        async def read() -> Any:
            await self.app.rt.book.sync()
            async with self.app.rt.db.read() as conn:
                return await conn.one("SELECT tool, reason, detail FROM audit_log ORDER BY id DESC LIMIT 1")

        return tuple(self.app.run(read()))  # type: ignore[return-value]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with served_in_process(tmp_path_factory.mktemp("dataflow") / "data", env=ENV) as app:
        s = Setup(app, 0, {})
        app.count_demo_requests(s.hits)
        with api(app) as admin:
            ok(admin.patch("/api/v1/toolkits/demo/access", json={"visibility": "published", "default": True}))
            for tool, labels in ((PRIVATE, ["private"]), (UNTRUSTED, ["untrusted"]), (OUTWARD, ["outward"])):
                shown = ok(admin.put("/api/v1/toolkits/demo/policy", json={"tool": tool, "labels": labels}))
            assert shown["labels"]["tools"] == {
                PRIVATE: ["private"],
                UNTRUSTED: ["untrusted"],
                OUTWARD: ["outward"],
            }
            uid = s.user_id = ok(admin.post("/api/v1/users", json={"name": "pat"}), 201)["id"]
            ok(admin.post(f"/api/v1/users/{uid}/credits", json={"amount": 100}), 201)
            s.keys["pat"] = ok(admin.post("/api/v1/keys", json={"user_id": uid}), 201)["key"]
            for name in ("bot", "other", "third"):
                agent = ok(admin.post("/api/v1/agents", json={"name": name, "user_id": uid}), 201)["id"]
                s.keys[name] = ok(admin.post("/api/v1/keys", json={"agent_id": agent}), 201)["key"]
        yield s


async def outward(client: Any) -> Any:
    return await client.call_tool("run_tool", {"tool": OUTWARD, "input": NOTE})


def test_read_private_then_untrusted_then_outward_asks_approval_and_others_run_at_once(setup: Setup) -> None:
    async def flow() -> dict[str, Any]:
        async with connect(as_key(setup.app, setup.keys["bot"])) as bot:
            first = await outward(bot)  # without that history: at once
            assert not first.is_error, first
            assert not (await bot.call_tool("use_tool", {"tool": UNTRUSTED, "input": {}})).is_error
            note = json.loads(first.content[0].text)["id"]
            assert not (
                await bot.call_tool("use_tool", {"tool": PRIVATE, "input": {"noteId": note}})
            ).is_error
            hits, balance = len(setup.hits), setup.balance()
            held = await outward(bot)
            assert held.is_error and held.meta["toolspoke/reason"] == "approval_required", held
            assert len(setup.hits) == hits and setup.balance() == balance  # nothing sent, nothing charged
            info: dict[str, Any] = held.meta["toolspoke/approval"]
            text = held.content[0].text
            assert "data-flow guard" in text and PRIVATE in text and UNTRUSTED in text, text
        async with connect(as_key(setup.app, setup.keys["other"])) as other:  # another agent: at once
            ran = await outward(other)
            assert not ran.is_error, ran
            assert len(setup.hits) == hits + 1
        return info

    info = run(flow())
    assert info["rule"] == "dataflow" and "within the last 3600 s" in info["why"]
    with api(setup.app) as admin:
        queued = next(a for a in ok(admin.get("/api/v1/approvals"))["approvals"] if a["id"] == info["id"])
        assert queued["why"] == info["why"] and queued["rule"] == "dataflow"
        history = ok(
            admin.get("/api/v1/toolkits/demo/calls", params={"tool": OUTWARD, "outcome": "blocked"})
        )["calls"]
        assert history[0]["reason"] == "approval_required" and history[0]["detail"] == info["why"]


def test_with_action_deny_the_held_outward_call_is_refused(setup: Setup) -> None:
    with api(setup.app) as admin:
        shown = ok(
            admin.put("/api/v1/toolkits/demo/policy", json={"dataflow": {"window_s": 600, "action": "deny"}})
        )
        assert shown["dataflow"] == {
            "window_s": 600,
            "action": "deny",
            "approver": "owner",
            "source": "toolkit",
        }

    async def flow() -> None:
        async with connect(as_key(setup.app, setup.keys["third"])) as third:
            assert not (await third.call_tool("use_tool", {"tool": UNTRUSTED, "input": {}})).is_error
            assert not (await third.call_tool("use_tool", {"tool": PRIVATE, "input": {"noteId": 1}})).is_error
            hits = len(setup.hits)
            refused = await outward(third)
            assert refused.is_error and refused.meta["toolspoke/reason"] == "dataflow_denied", refused
            assert "data-flow guard" in refused.content[0].text and len(setup.hits) == hits

    try:
        run(flow())
        tool, reason, detail = setup.last_row()
        assert (tool, reason) == (OUTWARD, "dataflow_denied") and detail is not None
        assert "within the last 600 s" in detail and "action deny" in detail
    finally:
        with api(setup.app) as admin:
            ok(admin.put("/api/v1/toolkits/demo/policy", json={"dataflow": None}))


def test_the_api_and_the_cli_give_the_same_answer_and_the_same_error(setup: Setup) -> None:
    with api(setup.app) as admin:
        by_api = ok(
            admin.put("/api/v1/toolkits/demo/policy", json={"tool": "deleteNote", "labels": ["outward"]})
        )
        code, out = setup.cli(
            "toolkits", "policy", "demo", "--tool", "deleteNote", "--labels", "outward", "--json"
        )
        assert code == 0, out
        by_cli = json.loads(out)
        assert by_cli == {**by_api, "version": by_api["version"] + 1}
        code, out = setup.cli("toolkits", "policy", "demo")
        assert (
            code == 0
            and "labels of demo__deleteNote: outward" in out
            and "data-flow guard (appliance's)" in out
        )
        refused = admin.put("/api/v1/toolkits/demo/policy", json={"tool": "deleteNote", "labels": ["secret"]})
        assert refused.status_code == 422
        message = refused.json()["error"]["message"]
        code, out = setup.cli("toolkits", "policy", "demo", "--tool", "deleteNote", "--labels", "secret")
        assert code != 0 and message in out, (message, out)
        refused = admin.put(
            "/api/v1/toolkits/demo/policy", json={"dataflow": {"window_s": 0, "action": "deny"}}
        )
        assert refused.status_code == 422
        message = refused.json()["error"]["message"]
        code, out = setup.cli(
            "toolkits", "policy", "demo", "--dataflow-window", "0", "--dataflow-action", "deny"
        )
        assert code != 0 and message in out, (message, out)
        both = admin.put("/api/v1/toolkits/demo/policy", json={"labels": [], "action": "deny"})
        assert both.status_code == 422
        ok(admin.put("/api/v1/toolkits/demo/policy", json={"tool": "deleteNote", "labels": None}))


def test_the_console_shows_the_labels_the_guard_and_why_it_asked(setup: Setup) -> None:
    client, _ = signed_in(setup.app, setup.app.key)
    page = client.get("/console/toolkits/default/demo")
    assert page.status_code == 200 and 'id="dataflow"' in page.text
    assert f"<code>{PRIVATE}</code></dt><dd>private</dd>" in page.text
    assert "within 3600 s" in page.text and "(appliance setting)" in page.text
    assert "data-flow guard: demo__createNote is labelled outward" in page.text  # the history's detail
    queue = client.get("/console/approvals").text
    assert "the data-flow guard" in queue and f"({PRIVATE}, " in queue
    client, _ = signed_in(setup.app, setup.keys["pat"])  # not pat's toolkit: not pat's to see
    assert 'id="dataflow"' not in client.get("/console/toolkits/default/demo").text
