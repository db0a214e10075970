"""A call refused for want of the person's connection (issue 19 item 2), asked in band where the
client takes URL-mode elicitation: the official SDK client (``mcp`` 2.x, which declares
``elicitation.form`` and ``elicitation.url`` when given an elicitation handler) on ``/mcp`` in
both eras, and raw 2026-07-28 retries.

The world is tests/web/test_connections.py's: a loopback authorization server and an MCP
server that records whose token each request carried; the toolkit is ``per_user`` and the
appliance has a public URL, so the connect page's URL is absolute. Each user connects through
the API's headless path (a plain HTTP client standing in for the browser).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError

from tests.support.accounts import add_agent_key, add_user_keys, as_key, credits_path, query, run, user_id
from tests.support.clients import connect, modern_tools_call
from tests.support.inprocess import BASE_URL, InProcess, served_in_process
from tests.support.oauth_world import OAuthWorld, oauth_world
from tests.support.servers import import_mcp

pytestmark = pytest.mark.inprocess

OWNER_TOKEN = "owner-token-0123456789abcdef"
TOOL = "acme__whoami"
PAGE = f"{BASE_URL}/console/connections?toolkit=acme&project=default"


@pytest.fixture(scope="module")
def world() -> Iterator[OAuthWorld]:
    with oauth_world(static={OWNER_TOKEN: "owner"}) as w:
        yield w


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, world: OAuthWorld) -> Iterator[InProcess]:
    env = {"TOOLSPOKE_PUBLIC_URL": BASE_URL}
    with served_in_process(tmp_path_factory.mktemp("connect_inband") / "data", env=env) as served:
        import_mcp(
            served,  # type: ignore[arg-type]
            world.mcp_url,
            "--slug",
            "acme",
            "--bearer-env",
            "OWNER_TOKEN",
            env={"OWNER_TOKEN": OWNER_TOKEN},
        )
        with _api(served, served.key) as api:
            _ok(api.patch("/toolkits/acme/access", json={"visibility": "published"}))
            _ok(api.put("/toolkits/acme/connection-mode", json={"mode": "per_user"}))
        yield served


@pytest.fixture(scope="module")
def keys(app: InProcess) -> dict[str, str]:
    """Per user: its agent's key (``name``) and its own (``name.person``), which connects."""
    out = {}
    for name in ("dana", "erin", "fay"):
        out[name] = add_user_keys(app.data_dir, name, 1, agents=True)[0]
        out[f"{name}.person"] = add_agent_key(app.data_dir, user_id(app.data_dir, name), None)  # type: ignore[arg-type]
        (agent_id,) = query(app.data_dir, "SELECT id FROM agents WHERE name = ?", (f"{name}-agent-0",))[0]
        with _api(app, app.key) as api:
            _ok(api.post("/grants", json={"agent_id": agent_id, "toolkit": "acme"}), 201)
            _ok(api.post(credits_path(app, name), json={"amount": 1000, "note": "test"}), 201)
    return out


def _api(app: InProcess, key: str) -> httpx.Client:
    return app.client(prefix="/api/v1", headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _ok(resp: httpx.Response, status: int = 200) -> Any:
    assert resp.status_code == status, resp.text
    return resp.json()


def connect_headless(app: InProcess, key: str, who: str) -> None:
    """tests/web/test_connections.py's headless path: the authorization URL opened by a
    stand-in browser logged in as ``who``, its redirect followed to ``/oauth/callback``."""
    with _api(app, key) as api:
        started = _ok(api.post("/connections/acme"))
    with httpx.Client(follow_redirects=False, timeout=30, headers={"Cookie": f"who={who}"}) as browser:
        answer = browser.get(started["authorization_url"])
    assert answer.status_code == 302, answer.text
    with app.client(follow_redirects=False) as back:
        page = back.get(answer.headers["location"].removeprefix(BASE_URL))
    assert page.status_code == 200 and "is ready" in page.text, page.text


def raw(app: InProcess, key: str, capabilities: dict[str, Any], **extra: Any) -> dict[str, Any]:
    headers, body = modern_tools_call(key, TOOL, {})
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = capabilities
    body["params"].update(extra)
    with app.client(headers=headers, timeout=60) as client:
        return dict(client.post("/mcp", json=body).json())


def audited(app: InProcess) -> list[str]:
    rows = query(app.data_dir, "SELECT reason FROM audit_log WHERE tool = ? ORDER BY id", (TOOL,))
    return [r[0] for r in rows]


async def refusal(call: Any) -> types.ErrorData:
    """The JSON-RPC error a call is refused with (caught inside the session: outside it the
    SDK's task groups wrap it)."""
    try:
        answer = await call
    except MCPError as exc:
        return exc.error
    raise AssertionError(f"not refused: {answer}")


class Person:
    """An elicitation handler: the user at the client, who opens the page and (``connects``)
    finishes connecting before answering."""

    def __init__(self, app: InProcess, key: str, who: str, connects: bool = True) -> None:
        self.app, self.key, self.who, self.connects = app, key, who, connects
        self.asked: list[types.ElicitRequestParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params)
        if self.connects:
            await asyncio.to_thread(connect_headless, self.app, self.key, self.who)
        return types.ElicitResult(action="accept")


def test_a_2025_client_with_url_mode_gets_the_url_elicitation_naming_the_connect_page(
    app: InProcess, keys: dict[str, str], world: OAuthWorld
) -> None:
    before = len(world.mcp_requests)
    person = Person(app, keys["dana.person"], "dana", connects=False)

    async def call() -> Any:
        async with connect(as_key(app, keys["dana"]), mode="legacy", elicitation_callback=person) as client:
            return await refusal(client.call_tool(TOOL, {}))

    error = run(call())
    assert error.code == -32042, error
    [asked] = UrlElicitationRequiredError.from_error(error).elicitations
    assert asked.mode == "url" and asked.url == PAGE and asked.elicitation_id, asked
    assert "'acme'" in asked.message and "Nothing was sent" in asked.message
    data = error.data
    assert data["reason"] == "connection_required" and data["connect_url"] == PAGE, data
    assert person.asked == []  # the error carries the elicitation: no elicitation/create is sent
    assert len(world.mcp_requests) == before and audited(app)[-1] == "connection_required"


def test_a_2026_client_gets_input_required_and_its_retry_runs_once_after_the_user_connects(
    app: InProcess, keys: dict[str, str], world: OAuthWorld
) -> None:
    person = Person(app, keys["erin.person"], "erin")
    world.mcp_requests.clear()

    async def call() -> Any:
        async with connect(as_key(app, keys["erin"]), elicitation_callback=person) as client:
            assert client.protocol_version == "2026-07-28"
            return await client.call_tool(TOOL, {})

    ran = run(call())
    assert not ran.is_error and ran.content[0].text == "you are erin", ran
    [asked] = person.asked
    assert isinstance(asked, types.ElicitRequestURLParams) and asked.url == PAGE, asked
    assert world.calls_by() == ["erin"]  # once, with erin's own token
    assert audited(app)[-2:] == ["connection_required", None]


def test_a_2026_retry_still_unconnected_asks_again_and_a_declined_one_gets_the_error(
    app: InProcess, keys: dict[str, str], world: OAuthWorld
) -> None:
    before, urls = len(world.mcp_requests), {"elicitation": {"url": {}}}
    first = raw(app, keys["dana"], urls)["result"]
    assert first["resultType"] == "input_required", first
    [(key, asked)] = first["inputRequests"].items()
    assert asked == {
        "method": "elicitation/create",
        "params": {"mode": "url", "url": PAGE, "message": asked["params"]["message"]},
    }
    state = first["requestState"]
    accepted = raw(app, keys["dana"], urls, inputResponses={key: {"action": "accept"}}, requestState=state)
    assert accepted["result"]["resultType"] == "input_required", accepted  # not connected yet
    declined = raw(app, keys["dana"], urls, inputResponses={key: {"action": "decline"}}, requestState=state)
    assert declined["error"]["code"] == -32008, declined
    stolen = raw(app, keys["fay"], urls, inputResponses={key: {"action": "accept"}}, requestState=state)
    assert stolen["error"]["code"] == -32602, stolen  # sealed for dana, not for fay
    assert len(world.mcp_requests) == before


def test_clients_without_url_mode_keep_the_connection_required_error(
    app: InProcess, keys: dict[str, str], world: OAuthWorld
) -> None:
    before = len(world.mcp_requests)
    for capabilities in ({}, {"elicitation": {}}, {"elicitation": {"form": {}}}):
        error = raw(app, keys["fay"], capabilities)["error"]
        assert error["code"] == -32008 and error["data"]["connect_url"] == PAGE, error
        assert "elicitations" not in error["data"]

    async def call() -> Any:
        async with connect(as_key(app, keys["fay"]), mode="legacy") as client:  # no handler
            return await refusal(client.call_tool(TOOL, {}))

    assert run(call()).code == -32008
    assert len(world.mcp_requests) == before
