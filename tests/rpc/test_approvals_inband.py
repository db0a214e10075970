"""Approvals asked in band, in process (tests/support/inprocess.py): the official SDK client
on ``/mcp`` with an elicitation handler, in both eras, and raw 2026-07-28 retries.

The demo toolkit's destructive tools need approval from the user the agent acts for
(approver ``user``: the person at the client may answer); ``demo__createNote`` needs its
owner's or an admin's (it stays out of band whatever the client can do). The demo's upstream
is wrapped to count what reaches it: a call runs once after a yes, never after a no.

The 2025-era client gets its ``elicitation/create`` on the POST's SSE stream, so its HTTP
client is the streaming one (answers arrive event by event). The legacy SSE stream and stdio
carry the same ask over their own channels: ``tests/rpc/test_approvals_inband_faces.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import mcp_types as types
import orjson
import pytest

from appliance.ledger import store as ledger_store
from appliance.web import mcp_replies
from tests.support.access_world import api, ok
from tests.support.accounts import as_key, run
from tests.support.clients import INIT, connect, modern_tools_call
from tests.support.inprocess import InProcess, served_in_process

pytestmark = pytest.mark.inprocess

ENV = {"TOOLSPOKE_DEFAULT_FEE": "1"}
FEE = 1000
ELICITING = {"elicitation": {"form": {}}}


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

    def reasons(self) -> list[str | None]:
        async def read() -> list[Any]:
            await self.app.rt.book.sync()
            async with self.app.rt.db.read() as conn:
                return await conn.all("SELECT reason FROM audit_log WHERE tool LIKE 'demo__%' ORDER BY id")

        return [r[0] for r in self.app.run(read())]

    def approval(self, approval_id: str) -> dict[str, Any]:
        with api(self.app) as admin:
            for state in ("pending", "approved", "denied", "used", "expired"):
                found = ok(admin.get("/api/v1/approvals", params={"state": state}))["approvals"]
                for a in found:
                    if a["id"] == approval_id:
                        return dict(a)
        raise AssertionError(f"no approval {approval_id}")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with served_in_process(tmp_path_factory.mktemp("inband") / "data", env=ENV) as app:
        s = Setup(app, 0, {})
        app.count_demo_requests(s.hits)
        with api(app) as admin:
            ok(admin.patch("/api/v1/toolkits/demo/access", json={"visibility": "published", "default": True}))
            rule = {"kind": "destructive", "action": "approve", "approver": "user"}
            ok(admin.put("/api/v1/toolkits/demo/policy", json=rule))
            ok(admin.put("/api/v1/toolkits/demo/policy", json={"tool": "createNote", "action": "approve"}))
            uid = s.user_id = ok(admin.post("/api/v1/users", json={"name": "pat"}), 201)["id"]
            ok(admin.post(f"/api/v1/users/{uid}/credits", json={"amount": 100}), 201)
            agent = ok(admin.post("/api/v1/agents", json={"name": "bot", "user_id": uid}), 201)["id"]
            s.keys["bot"] = ok(admin.post("/api/v1/keys", json={"agent_id": agent}), 201)["key"]
        yield s


class Person:
    """An elicitation handler: the user at the client, answering each ask as told."""

    def __init__(self, action: str = "accept", approve: bool = True) -> None:
        self.action, self.approve = action, approve
        self.asked: list[types.ElicitRequestParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params)
        if self.action != "accept":
            return types.ElicitResult(action=self.action)  # type: ignore[arg-type]
        return types.ElicitResult(action="accept", content={"approve": self.approve})


def meta_of(result: Any) -> dict[str, Any]:
    return dict(result.meta or {})


def test_a_2025_session_approves_a_destructive_call_in_band_and_it_runs_once(setup: Setup) -> None:
    before, hits, person = setup.balance(), len(setup.hits), Person()

    async def call() -> Any:
        bot = as_key(setup.app, setup.keys["bot"])
        async with connect(bot, mode="legacy", streaming=True, elicitation_callback=person) as client:
            return await client.call_tool("demo__deleteNote", {"noteId": 41})

    ran = run(call())
    # the demo has no note 41: the upstream's 404 is the answer, but the call ran, once
    assert not str(meta_of(ran).get("toolspoke/reason", "")).startswith("approval_"), ran
    assert setup.hits[hits:] == ["DELETE /demo/api/notes/41"]
    assert setup.balance() == before - FEE
    [asked] = person.asked
    assert isinstance(asked, types.ElicitRequestFormParams)
    text = asked.message
    assert "demo__deleteNote (destructive)" in text and '{"noteId":41}' in text and "1 credit" in text, text
    assert "http" not in text  # form mode: no URL to click
    assert asked.requested_schema["properties"]["approve"]["type"] == "boolean"
    reasons = setup.reasons()
    assert reasons[-3:-1] == ["approval_required", "approval_granted"], reasons


def test_a_2025_session_that_declines_leaves_the_upstream_untouched_and_nothing_charged(setup: Setup) -> None:
    before, hits, person = setup.balance(), len(setup.hits), Person("decline")

    async def call() -> Any:
        bot = as_key(setup.app, setup.keys["bot"])
        async with connect(bot, mode="legacy", streaming=True, elicitation_callback=person) as client:
            return await client.call_tool(
                "run_destructive_tool", {"tool": "demo__deleteNote", "input": {"noteId": 42}}
            )

    refused = run(call())
    assert refused.is_error and meta_of(refused)["toolspoke/reason"] == "approval_denied", refused
    assert len(person.asked) == 1
    assert len(setup.hits) == hits and setup.balance() == before
    approval_id = meta_of(refused)["toolspoke/approval_id"]
    shown = setup.approval(approval_id)
    assert shown["state"] == "denied" and shown["decided_by"] == "pat in band", shown
    assert setup.reasons()[-3:] == ["approval_required", "approval_denied", "approval_denied"]


def test_a_2025_answer_that_decides_nothing_leaves_the_approval_to_the_console(setup: Setup) -> None:
    hits, person = len(setup.hits), Person("cancel")

    async def call() -> Any:
        bot = as_key(setup.app, setup.keys["bot"])
        async with connect(bot, mode="legacy", streaming=True, elicitation_callback=person) as client:
            return await client.call_tool("demo__deleteNote", {"noteId": 43})

    pending = run(call())
    info = meta_of(pending)["toolspoke/approval"]
    assert pending.is_error and meta_of(pending)["toolspoke/reason"] == "approval_required"
    assert info["state"] == "pending" and setup.approval(info["id"])["state"] == "pending"
    assert len(person.asked) == 1 and len(setup.hits) == hits


def test_a_2026_client_completes_the_call_through_the_input_required_round_trip(setup: Setup) -> None:
    before, hits, person = setup.balance(), len(setup.hits), Person()

    async def call() -> Any:
        bot = as_key(setup.app, setup.keys["bot"])
        async with connect(bot, elicitation_callback=person) as client:
            assert client.protocol_version == "2026-07-28"
            return await client.call_tool("demo__deleteNote", {"noteId": 51})

    ran = run(call())
    assert not str(meta_of(ran).get("toolspoke/reason", "")).startswith("approval_"), ran
    assert setup.hits[hits:] == ["DELETE /demo/api/notes/51"]
    assert setup.balance() == before - FEE
    [asked] = person.asked
    assert "demo__deleteNote (destructive)" in asked.message and '{"noteId":51}' in asked.message
    assert setup.reasons()[-3:-1] == ["approval_required", "approval_granted"]


def test_a_2026_client_that_declines_leaves_the_upstream_untouched(setup: Setup) -> None:
    before, hits, person = setup.balance(), len(setup.hits), Person(approve=False)  # the form sent with no

    async def call() -> Any:
        bot = as_key(setup.app, setup.keys["bot"])
        async with connect(bot, elicitation_callback=person) as client:
            return await client.call_tool("demo__deleteNote", {"noteId": 52})

    refused = run(call())
    assert refused.is_error and meta_of(refused)["toolspoke/reason"] == "approval_denied", refused
    assert len(setup.hits) == hits and setup.balance() == before


def _raw(setup: Setup, arguments: dict[str, Any], **extra: Any) -> httpx.Response:
    headers, body = modern_tools_call(setup.keys["bot"], "demo__deleteNote", arguments)
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = ELICITING
    body["params"].update(extra)
    return setup.app.request("POST", "/mcp", headers=headers, json=body)


def test_a_2026_retry_with_other_arguments_or_a_forged_state_runs_nothing(setup: Setup) -> None:
    hits = len(setup.hits)
    first = _raw(setup, {"noteId": 61}).json()["result"]
    assert first["resultType"] == "input_required", first
    [(key, asked)] = first["inputRequests"].items()
    assert asked["method"] == "elicitation/create" and asked["params"]["mode"] == "form"
    state = first["requestState"]
    yes = {key: {"action": "accept", "content": {"approve": True}}}

    changed = _raw(setup, {"noteId": 62}, inputResponses=yes, requestState=state).json()["result"]
    assert changed["isError"] and changed["_meta"]["toolspoke/reason"] == "approval_mismatch", changed
    head, mac = state.split(".")
    forged = _raw(setup, {"noteId": 61}, inputResponses=yes, requestState=head + "." + mac[::-1])
    assert forged.status_code == 400 and forged.json()["error"]["code"] == -32602, forged.text
    other_key = _raw(setup, {"noteId": 61}, inputResponses=yes, requestState=state + "x")
    assert other_key.status_code == 400
    assert len(setup.hits) == hits  # nothing sent, and nothing decided: the same retry still runs

    ran = _raw(setup, {"noteId": 61}, inputResponses=yes, requestState=state).json()["result"]
    assert ran["resultType"] == "complete" and "approval_" not in str(ran["_meta"].get("toolspoke/reason"))
    again = _raw(setup, {"noteId": 61}, inputResponses=yes, requestState=state).json()["result"]
    assert again["isError"] and again["_meta"]["toolspoke/reason"] == "approval_used", again
    assert setup.hits[hits:] == ["DELETE /demo/api/notes/61"]


def test_clients_without_the_capability_and_owner_rules_stay_out_of_band(setup: Setup) -> None:
    hits, person = len(setup.hits), Person()

    async def calls() -> list[Any]:
        bot = as_key(setup.app, setup.keys["bot"])
        async with connect(bot, mode="legacy", streaming=True) as plain:  # no elicitation handler
            legacy = await plain.call_tool("demo__deleteNote", {"noteId": 71})
        async with connect(bot) as modern:
            fresh = await modern.call_tool("demo__deleteNote", {"noteId": 72})
        async with connect(bot, mode="legacy", streaming=True, elicitation_callback=person) as asking:
            owners = await asking.call_tool("demo__createNote", {"body": {"title": "t"}})
        async with connect(bot, elicitation_callback=person) as asking:
            owners_modern = await asking.call_tool("demo__createNote", {"body": {"title": "u"}})
        return [legacy, fresh, owners, owners_modern]

    for result in run(calls()):
        assert result.is_error and meta_of(result)["toolspoke/reason"] == "approval_required", result
        assert meta_of(result)["toolspoke/approval"]["url"].startswith("/console/approvals#")
    assert person.asked == [] and len(setup.hits) == hits


def test_on_streamable_http_the_ask_rides_the_calls_stream_kept_alive_and_the_answer_is_a_post(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 2025 wire itself, read raw: the call's POST answers with an SSE stream that carries
    the ``elicitation/create`` (then comments, while the person reads), the answer goes as a
    POST of its own (202), and the call's response ends the stream."""
    monkeypatch.setattr(mcp_replies, "KEEPALIVE_S", 0.05)
    hits = len(setup.hits)
    headers = {
        "Authorization": f"Bearer {setup.keys['bot']}",
        "Accept": "application/json, text/event-stream",
    }

    async def scenario() -> tuple[list[str], dict[str, Any], int]:
        async with setup.app.async_client(headers=headers, streaming=True, timeout=30) as http:
            init = {**INIT, "params": {**INIT["params"], "capabilities": ELICITING}}
            opened = await http.post("/mcp", json=init)
            session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
            await http.post(
                "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
            )
            call = {"name": "demo__deleteNote", "arguments": {"noteId": 95}}
            body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": call}
            seen: list[str] = []
            async with http.stream("POST", "/mcp", json=body, headers=session) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                lines = stream.aiter_lines()
                ask = await _next_data(lines, seen)
                while ": keep-alive" not in seen:
                    seen.append(await anext(lines))
                yes = {"action": "accept", "content": {"approve": True}}
                answered = await http.post(
                    "/mcp", json={"jsonrpc": "2.0", "id": ask["id"], "result": yes}, headers=session
                )
                response = await _next_data(lines, seen)
            assert ask["method"] == "elicitation/create" and response["id"] == 7
            return seen, response, answered.status_code

    seen, response, status = run(scenario())
    assert status == 202 and seen.index(": keep-alive") < len(seen) - 1  # kept alive, then answered
    assert "approval_" not in str(response["result"].get("_meta", {}).get("toolspoke/reason"))
    assert setup.hits[hits:] == ["DELETE /demo/api/notes/95"]


async def _next_data(lines: Any, seen: list[str]) -> dict[str, Any]:
    while True:
        line = await anext(lines)
        seen.append(line)
        if line.startswith("data: "):
            return dict(orjson.loads(line[6:]))
