"""Connections (issue 19) end to end: a real ``toolspoke serve``, a real OAuth authorization
server and a real MCP server that validates its tokens, and Debian's headless Chromium.

The world (``tests/support/oauth_world.py``, an HTTP server on a loopback socket) is the
authorization server (metadata, Client ID Metadata Documents fetched from the appliance,
registration, a consent page, code + PKCE, rotating refresh tokens, revocation) and the MCP
server, which refuses any request without a live access
token and records whose token each request carried. The appliance knows its own address
(``TOOLSPOKE_PUBLIC_URL``) so the authorization server can send browsers back to its
``/oauth/callback``.

Two users share the ``per_user`` toolkit ``acme``. Alice connects in the browser, through the
console's Connections page and the authorization server's consent page, and comes back to the
console connected; bob does not, and his agent (the official SDK client over ``/mcp``) is
refused ``-32008`` naming the toolkit and its connect URL, with nothing sent upstream. Alice's
calls carry alice's token only. Bob connects through the API's headless path, and his calls
carry his. Alice's access token expires at the authorization server: her next call is
refreshed and answered. Alice disconnects in the console: the authorization server has her
tokens revoked, and her next call is refused with nothing sent.

The steps run in this order on one appliance and one browser page.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from playwright import sync_api

from tests.e2e import test_console_browser
from tests.e2e.test_console_browser import Watched
from tests.support.accounts import admin, as_key, query
from tests.support.clients import connect, result_text
from tests.support.oauth_world import OAuthWorld, oauth_world
from tests.support.peers import free_port
from tests.support.servers import Appliance, import_mcp, running_appliance

pytestmark = pytest.mark.e2e

OWNER_TOKEN = "owner-token-0123456789abcdef"  # the importer's own, fixed token (for tools/list)
TOOL = "acme__whoami"
CLIENT_ORIGIN = "https://toolspoke.test"
CLIENT_ID = f"{CLIENT_ORIGIN}/oauth/client-metadata.json"
expect = sync_api.expect
browser = test_console_browser.browser  # Chromium, started the one way the console tests start it


@pytest.fixture(scope="module")
def world() -> Iterator[OAuthWorld]:
    with oauth_world(static={OWNER_TOKEN: "owner"}, consent=True) as w:
        yield w


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, world: OAuthWorld) -> Iterator[Appliance]:
    port = free_port()
    env = {
        "TOOLSPOKE_DEMO": "0",
        "TOOLSPOKE_HEALTH_INTERVAL_S": "0",  # the MCP server sees calls only
        "TOOLSPOKE_PUBLIC_URL": f"http://127.0.0.1:{port}",
        # The appliance's client id is its Client ID Metadata Document's https URL, which the
        # authorization server fetches (its stand-in DNS maps the name to this appliance).
        "TOOLSPOKE_OAUTH_CLIENT_METADATA_URL": CLIENT_ID,
    }
    world.cimd_origins[CLIENT_ORIGIN] = f"http://127.0.0.1:{port}"
    data = tmp_path_factory.mktemp("connections-flow") / "data"
    with running_appliance(data, env=env, port=port) as running:
        assert running.base_url == env["TOOLSPOKE_PUBLIC_URL"]
        report = import_mcp(
            running, world.mcp_url, "--slug", "acme", "--bearer-env", "T", env={"T": OWNER_TOKEN}
        )
        assert report["tool_count"] == 1
        for method, path, body in (
            ("PATCH", "/toolkits/acme/access", {"visibility": "published"}),
            ("PUT", "/toolkits/acme/connection-mode", {"mode": "per_user"}),
        ):
            assert admin(running, method, path, body).status_code == 200
        yield running


class Flow:
    """The keys of the two users and their agents, and the browser page the steps share."""

    def __init__(self, watched: Watched) -> None:
        self.watched = watched
        self.page = watched.page
        self.keys: dict[str, dict[str, str]] = {}


@pytest.fixture(scope="module")
def flow(browser: Any, app: Appliance) -> Iterator[Flow]:
    watched = Watched(browser)
    found = Flow(watched)
    for name in ("alice", "bob"):
        made = admin(app, "POST", "/users", {"name": name})
        assert made.status_code == 201, made.text
        uid = int(query(app.data_dir, "SELECT id FROM users WHERE name = ?", (name,))[0][0])
        assert admin(app, "POST", f"/users/{uid}/credits", {"amount": 100}).status_code == 201
        person = admin(app, "POST", "/keys", {"user_id": uid}).json()["key"]
        agent = admin(app, "POST", "/agents", {"name": f"{name}-bot", "user_id": uid}).json()["id"]
        assert admin(app, "POST", "/grants", {"agent_id": agent, "toolkit": "acme"}).status_code == 201
        key = admin(app, "POST", "/keys", {"agent_id": agent}).json()["key"]
        found.keys[name] = {"person": person, "agent": key}
    try:
        yield found
    finally:
        watched.page.close()


def agent_call(app: Appliance, key: str) -> Any:
    """One tools/call of the toolkit's tool by the official SDK client, on a session of its own:
    its result, or the ``MCPError`` it raised."""

    async def run() -> Any:
        async with connect(as_key(app, key)) as client:
            try:
                return await client.call_tool(TOOL, {})
            except MCPError as exc:
                return exc

    # Playwright's sync API keeps an event loop running in this thread: the SDK runs in another.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result(timeout=120)


def said(app: Appliance, key: str) -> str:
    result = agent_call(app, key)
    assert not isinstance(result, MCPError), result.error
    assert not result.is_error, result_text(result)
    return result_text(result).removesuffix("{}")


def connect_url(app: Appliance) -> str:
    return f"{app.base_url}/console/connections?toolkit=acme&project=default"


def test_1_alice_connects_in_the_browser_through_the_consent_page(
    app: Appliance, world: OAuthWorld, flow: Flow
) -> None:
    page = flow.page
    page.goto(app.base_url + "/")
    page.get_by_label("Your API key").fill(flow.keys["alice"]["person"])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/toolkits")
    page.get_by_role("link", name="Connections", exact=True).click()
    row = page.locator("tr#conn-default-acme")
    expect(row).to_contain_text("not connected")
    row.get_by_role("button", name="Connect").click()
    expect(page.locator("h1")).to_have_text("Connect acme")
    page.get_by_role("link", name="Continue to the authorization server").click()
    # The authorization server's own page, at its own origin: sign in there and allow.
    page.wait_for_url(world.base_url + "/authorize?*")
    expect(page.locator("h1")).to_have_text(f"Authorize {CLIENT_ID}")  # the document's URL
    assert world.cimd_fetches and set(world.cimd_fetches) == {CLIENT_ID}
    assert world.registrations == []  # no dynamic registration: the document came first
    page.get_by_label("Sign in as").fill("alice")
    page.get_by_role("button", name="Allow").click()
    # Its redirect to /oauth/callback, handed on to the console in the same session.
    page.wait_for_url("**/console/connections?connected=1")
    expect(page.get_by_role("status")).to_have_text("Connected.")
    expect(page.locator("tr#conn-default-acme")).to_contain_text("connected (oauth)")
    expect(page.locator("tr#conn-default-acme")).to_contain_text("tools")
    assert world.grants == [("authorization_code", "alice")]
    assert not any(t in page.content() for t in world.tokens)
    flow.watched.assert_nothing_ran()


def test_2_bobs_agent_is_refused_with_the_connect_url_and_nothing_reaches_the_server(
    app: Appliance, world: OAuthWorld, flow: Flow
) -> None:
    before = len(world.mcp_requests)
    refused = agent_call(app, flow.keys["bob"]["agent"])
    assert isinstance(refused, MCPError), refused
    assert refused.error.code == -32008
    assert refused.error.data["reason"] == "connection_required"
    assert refused.error.data["toolkit"] == "acme" and refused.error.data["project"] == "default"
    assert refused.error.data["connect_url"] == connect_url(app)
    assert connect_url(app) in refused.error.message
    assert len(world.mcp_requests) == before  # nothing was sent upstream for bob
    assert all(user != "bob" for _, user in world.mcp_requests)


def test_3_alices_calls_carry_alices_token_only(app: Appliance, world: OAuthWorld, flow: Flow) -> None:
    world.mcp_requests.clear()
    assert said(app, flow.keys["alice"]["agent"]) == "you are alice"
    assert said(app, flow.keys["alice"]["agent"]) == "you are alice"
    assert world.calls_by() == ["alice", "alice"]
    assert {user for _, user in world.mcp_requests} == {"alice"}  # the handshake too


def test_4_bob_connects_headless_through_the_api_and_his_calls_carry_his_token(
    app: Appliance, world: OAuthWorld, flow: Flow
) -> None:
    headers = {"Authorization": f"Bearer {flow.keys['bob']['person']}"}
    started = httpx.post(app.base_url + "/api/v1/connections/acme", headers=headers, timeout=30)
    assert started.status_code == 200, started.text
    url, redirect_uri = started.json()["authorization_url"], started.json()["redirect_uri"]
    assert redirect_uri == f"{app.base_url}/oauth/callback" and url.startswith(world.base_url)
    # A plain HTTP client, signed in at the authorization server as bob (no consent page
    # for a known session), follows its redirect to the appliance's own callback.
    with httpx.Client(follow_redirects=True, timeout=30, headers={"Cookie": "who=bob"}) as browser:
        done = browser.get(url)
    assert done.status_code == 200 and str(done.url).startswith(redirect_uri + "?"), done.text
    assert "is ready" in done.text
    world.mcp_requests.clear()
    answers = [said(app, flow.keys[u]["agent"]) for u in ("bob", "alice", "bob")]
    assert answers == ["you are bob", "you are alice", "you are bob"]
    assert world.calls_by() == ["bob", "alice", "bob"]  # each request: its caller's token


def test_5_alices_expired_token_is_refreshed_with_no_failed_call(
    app: Appliance, world: OAuthWorld, flow: Flow
) -> None:
    world.expire("alice")  # the server refuses it now; the appliance thinks it good
    world.grants.clear()
    world.mcp_requests.clear()
    assert said(app, flow.keys["alice"]["agent"]) == "you are alice"
    assert world.grants == [("refresh_token", "alice")]
    # One agent call: the expired token's request refused (401), the refresh, the same call again.
    assert world.calls_by() == [None, "alice"]
    rows = query(
        app.data_dir,
        "SELECT outcome FROM audit_log WHERE tool = ? ORDER BY id DESC LIMIT 1",
        (TOOL,),
    )
    assert rows == [("ok",)], rows


def test_6_alice_disconnects_in_the_console_and_the_server_revokes_her_tokens(
    app: Appliance, world: OAuthWorld, flow: Flow
) -> None:
    page = flow.page
    page.goto(app.base_url + "/console/connections")
    page.locator("tr#conn-default-acme").get_by_role("button", name="Disconnect").click()
    expect(page.get_by_role("status")).to_contain_text("Disconnected")
    expect(page.locator("tr#conn-default-acme")).to_contain_text("not connected")
    assert "alice" in world.revoked
    assert not any(t.user == "alice" and not t.revoked for t in world.tokens.values())
    sent = len(world.mcp_requests)
    refused = agent_call(app, flow.keys["alice"]["agent"])
    assert isinstance(refused, MCPError) and refused.error.code == -32008, refused
    assert len(world.mcp_requests) == sent  # nothing was sent
    assert said(app, flow.keys["bob"]["agent"]) == "you are bob"  # bob's connection stands
    flow.watched.assert_nothing_ran()
