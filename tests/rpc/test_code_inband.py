"""A script's call that needs a person's approval (issue 24), in process with the official SDK.

On a 2025-era session whose client takes elicitation the run pauses where it stands: the
person is asked as for a direct call, and the script goes on with the call approved (or ends
``approval_denied`` with nothing sent). A 2026-07-28 client cannot be held inside a request:
its ``input_required`` round trip ends the run, and its retry runs the same script again,
where the approved call uses the approval once. The demo's upstream is wrapped to count what
reaches it; its destructive tools need the approval of the user the agent acts for.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import pytest

from tests.support.access_world import api, ok
from tests.support.accounts import as_key, run
from tests.support.clients import connect
from tests.support.console_pages import signed_in
from tests.support.inprocess import InProcess, served_in_process

pytestmark = pytest.mark.inprocess

ENV = {"TOOLSPOKE_CODE_TOOLS": "1", "TOOLSPOKE_CODE_SECONDS": "2"}
CHAIN = """
const made = await demo__createNote({ body: { title: 'scratch' } });
const gone = await demo__deleteNote({ noteId: made.id });
return [made.title, gone === null || typeof gone];
"""


@dataclass
class Setup:
    app: InProcess
    key: str = ""
    hits: list[str] = field(default_factory=list)

    def reasons(self, run_id: str) -> list[tuple[str, str | None]]:
        async def read() -> list[Any]:
            await self.app.rt.book.sync()
            async with self.app.rt.db.read() as conn:
                return await conn.all(
                    "SELECT tool, reason FROM audit_log WHERE code_run = ? ORDER BY id", (run_id,)
                )

        return [(r[0], r[1]) for r in self.app.run(read())]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with served_in_process(tmp_path_factory.mktemp("code-inband") / "data", env=ENV) as app:
        s = Setup(app)
        app.count_demo_requests(s.hits, with_target=False)
        with api(app) as admin:
            ok(admin.patch("/api/v1/toolkits/demo/access", json={"visibility": "published", "default": True}))
            rule = {"kind": "destructive", "action": "approve", "approver": "user"}
            ok(admin.put("/api/v1/toolkits/demo/policy", json=rule))
            uid = ok(admin.post("/api/v1/users", json={"name": "pat"}), 201)["id"]
            ok(admin.post(f"/api/v1/users/{uid}/credits", json={"amount": 100}), 201)
            agent = ok(admin.post("/api/v1/agents", json={"name": "bot", "user_id": uid}), 201)["id"]
            s.key = ok(admin.post("/api/v1/keys", json={"agent_id": agent}), 201)["key"]
        yield s


class Person:
    def __init__(self, approve: bool = True) -> None:
        self.approve = approve
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": self.approve})


def script(setup: Setup, person: Person, code: str, *, mode: str) -> Any:
    async def go() -> Any:
        bot = as_key(setup.app, setup.key)
        async with connect(bot, mode=mode, streaming=True, elicitation_callback=person) as client:
            return await client.call_tool("run_code", {"code": code})

    return run(go())


def test_a_2025_session_pauses_the_script_asks_and_goes_on_with_the_approved_call(setup: Setup) -> None:
    hits, person = len(setup.hits), Person()
    result = script(setup, person, CHAIN, mode="legacy")
    assert not result.is_error, result
    value = result.structured_content
    assert value["result"][0] == "scratch" and value["calls"] == 2
    assert setup.hits[hits:] == ["POST", "DELETE"]  # each once: the script was never run again
    [asked] = person.asked
    assert "demo__deleteNote (destructive)" in asked
    assert [r for _, r in setup.reasons(value["run"])] == [None, "approval_required", "approval_used", None]
    # the console's call history marks each call the script made with its run
    client, _ = signed_in(setup.app, setup.app.key)
    page = client.get("/console/toolkits/default/demo").text
    assert page.count(f"in script run {value['run']}") == 3  # createNote, deleteNote asked, then run


def test_a_2025_no_ends_the_run_with_nothing_sent_and_says_what_ran_before(setup: Setup) -> None:
    hits, person = len(setup.hits), Person(approve=False)
    result = script(setup, person, CHAIN, mode="legacy")
    assert result.is_error and (result.meta or {})["toolspoke/reason"] == "approval_denied", result
    assert setup.hits[hits:] == ["POST"] and len(person.asked) == 1


def test_a_2026_client_runs_the_script_again_after_its_input_required_round_trip(setup: Setup) -> None:
    hits, person = len(setup.hits), Person()
    code = "try { await demo__deleteNote({ noteId: 7070 }); return 'deleted' } catch (e) { return e.reason }"
    result = script(setup, person, code, mode="auto")
    assert not result.is_error, result
    # the demo has no note 7070: its 404 is the answer, but the call ran, once
    assert result.structured_content["result"] == "upstream_http_error"
    assert setup.hits[hits:] == ["DELETE"] and len(person.asked) == 1


def test_a_script_with_no_place_to_run_within_its_time_ends_busy_and_runs_nothing(setup: Setup) -> None:
    slots = setup.app.rt.code_slots
    places = setup.app.rt.settings.code_runs_at_once
    for _ in range(places):  # every place taken, as by scripts running the whole time
        setup.app.run(slots.acquire())
    hits = len(setup.hits)
    try:

        async def call() -> Any:
            async with connect(as_key(setup.app, setup.key)) as client:
                return await client.call_tool("use_code", {"code": "return await demo__listNotes({})"})

        result = run(call())
    finally:

        async def give_back() -> None:  # on the app's loop, which the semaphore belongs to
            for _ in range(places):
                slots.release()

        setup.app.run(give_back())
    value = result.structured_content
    assert (
        result.is_error and value["reason"] == "code_busy" and "no place to run within 2 s" in value["error"]
    )
    assert value["calls"] == [] and len(setup.hits) == hits
    assert setup.reasons(value["run"]) == [("use_code", "code_busy")]
