"""Connections (issue 19) in process: a ``per_user`` toolkit in front of a loopback OAuth world.

The world (``tests/support/oauth_world.py``) is an authorization server (metadata,
registration, code + PKCE, rotating refresh tokens, revocation) and an MCP server that
refuses any request without a live access token and records whose token each request
carried. The toolkit is imported with the owner's fixed token, published, and switched to
``per_user``; alice and bob connect through the API's headless path (the authorization URL
opened by a plain HTTP client standing in for the browser, the redirect followed to the
appliance's own ``/oauth/callback``). The tests run in order on one appliance.

The same path on a real ``toolspoke serve``, with the console driven in Chromium, is
tests/e2e/test_connections_flow.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from appliance.gateway import connections, redaction
from appliance.secret import Redactor
from tests.support.accounts import add_agent_key, add_user_keys, credits_path, query, user_id
from tests.support.clients import modern_tools_call
from tests.support.inprocess import BASE_URL, InProcess, served_in_process
from tests.support.oauth_world import OAuthWorld, oauth_world
from tests.support.servers import import_mcp

pytestmark = pytest.mark.inprocess

OWNER_TOKEN = "owner-token-0123456789abcdef"
CAROL_TOKEN = "carol-own-token-0123456789abcdef"
TOOL = "acme__whoami"


@pytest.fixture(scope="module")
def world() -> Iterator[OAuthWorld]:
    with oauth_world(static={OWNER_TOKEN: "owner", CAROL_TOKEN: "carol"}) as w:
        yield w


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, world: OAuthWorld) -> Iterator[InProcess]:
    env = {"TOOLSPOKE_PUBLIC_URL": BASE_URL}
    with served_in_process(tmp_path_factory.mktemp("connections") / "data", env=env) as served:
        report = import_mcp(
            served,  # type: ignore[arg-type]
            world.mcp_url,
            "--slug",
            "acme",
            "--bearer-env",
            "OWNER_TOKEN",
            env={"OWNER_TOKEN": OWNER_TOKEN},
        )
        assert report["tool_count"] == 1
        with admin(served) as api:
            ok(api.patch("/toolkits/acme/access", json={"visibility": "published"}))
        yield served


@pytest.fixture(scope="module")
def keys(app: InProcess) -> dict[str, dict[str, str]]:
    """Per user: its own key ("person") and one agent's key ("agent")."""
    out = {}
    for name in ("alice", "bob", "carol"):
        agent = add_user_keys(app.data_dir, name, 1, agents=True)[0]
        person = add_agent_key(app.data_dir, user_id(app.data_dir, name), None)  # type: ignore[arg-type]
        out[name] = {"person": person, "agent": agent}
        (agent_id,) = query(app.data_dir, "SELECT id FROM agents WHERE name = ?", (f"{name}-agent-0",))[0]
        with admin(app) as api:
            ok(api.post("/grants", json={"agent_id": agent_id, "toolkit": "acme"}), 201)
            ok(api.post(credits_path(app, name), json={"amount": 1000, "note": "test"}), 201)
    return out


def admin(app: InProcess) -> httpx.Client:
    return app.client(prefix="/api/v1", headers={"Authorization": f"Bearer {app.key}"}, timeout=60)


def api_as(app: InProcess, key: str) -> httpx.Client:
    return app.client(prefix="/api/v1", headers={"Authorization": f"Bearer {key}"}, timeout=60)


def ok(resp: httpx.Response, status: int = 200) -> Any:
    assert resp.status_code == status, resp.text
    return resp.json()


def call(app: InProcess, key: str, tool: str = TOOL) -> dict[str, Any]:
    headers, body = modern_tools_call(key, tool, {})
    with app.client(headers=headers, timeout=60) as client:
        return dict(client.post("/mcp", json=body).json())


def text_of(answer: dict[str, Any]) -> str:
    assert "result" in answer, answer
    return str(answer["result"]["content"][0]["text"])


def search(app: InProcess, key: str) -> list[dict[str, Any]]:
    answer = call_bridge(app, key, "search_tools", {"query": "which account does the token belong to"})
    return [r for r in answer["result"]["structuredContent"]["results"] if r["name"] == TOOL]


def call_bridge(app: InProcess, key: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    headers, body = modern_tools_call(key, tool, arguments)
    with app.client(headers=headers, timeout=60) as client:
        return dict(client.post("/mcp", json=body).json())


def connect_headless(app: InProcess, key: str, who: str) -> dict[str, Any]:
    """The API's headless path: the URL opened by a stand-in browser logged in as ``who``,
    the authorization server's redirect followed to the appliance's ``/oauth/callback``."""
    with api_as(app, key) as api:
        started = ok(api.post("/connections/acme"))
    assert started["redirect_uri"] == f"{BASE_URL}/oauth/callback"
    with httpx.Client(follow_redirects=False, timeout=30, headers={"Cookie": f"who={who}"}) as browser:
        answer = browser.get(started["authorization_url"])
    assert answer.status_code == 302, answer.text
    location = answer.headers["location"]
    assert location.startswith(started["redirect_uri"] + "?")
    with app.client(follow_redirects=False) as back:
        page = back.get(location.removeprefix(BASE_URL))
    assert page.status_code == 200, page.text
    assert "is ready" in page.text
    return started


def test_the_mode_is_set_by_a_manager_and_shown_with_nobody_connected(app: InProcess, keys: Any) -> None:
    with api_as(app, keys["alice"]["person"]) as api:
        assert api.put("/toolkits/acme/connection-mode", json={"mode": "per_user"}).status_code == 404
    with admin(app) as api:
        refused = ok(api.put("/toolkits/acme/connection-mode", json={"mode": "sometimes"}), 422)
        assert refused["error"]["field"] == "mode", refused
        shown = ok(api.put("/toolkits/acme/connection-mode", json={"mode": "per_user"}))
    assert shown == {"toolkit": "acme", "project": "default", "mode": "per_user", "connected": []}


def test_a_call_without_a_connection_is_refused_before_anything_leaves(
    app: InProcess, keys: Any, world: OAuthWorld
) -> None:
    before = len(world.mcp_requests)
    answer = call(app, keys["bob"]["agent"])
    error = answer["error"]
    assert error["code"] == -32008, error
    assert error["data"]["reason"] == "connection_required"
    assert error["data"]["toolkit"] == "acme"
    assert error["data"]["connect_url"] == f"{BASE_URL}/console/connections?toolkit=acme&project=default"
    assert len(world.mcp_requests) == before  # nothing reached the upstream
    rows = query(
        app.data_dir,
        "SELECT outcome, reason, fee_milli FROM audit_log WHERE tool = ? ORDER BY id DESC LIMIT 1",
        (TOOL,),
    )
    assert rows and rows[0][1] == "connection_required" and not rows[0][2]
    assert search(app, keys["bob"]["agent"])[0]["connected"] is False


def test_a_user_that_is_not_a_name_or_an_id_is_refused_naming_the_field(app: InProcess) -> None:
    # Schemathesis once sent an object as ``user``: it reached the database as a parameter (500).
    with admin(app) as api:
        for bad in ({}, [], True, ""):
            for answer in (
                api.post("/connections/acme", json={"user": bad}),
                api.put("/connections/acme", json={"scheme": "bearer", "token": "x" * 20, "user": bad}),
            ):
                refused = ok(answer, 422)
                assert refused["error"]["field"] == "user", refused


def test_a_person_with_no_connection_sees_it_listed_to_connect(app: InProcess, keys: Any) -> None:
    from tests.support.console_pages import signed_in

    with api_as(app, keys["bob"]["person"]) as api:
        (row,) = ok(api.get("/connections"))["connections"]
    assert row["status"] == "not_connected" and row["scopes"] == [] and row["scheme"] is None
    assert row["expires_at"] is None and "oauth" in row["schemes"]
    console, _ = signed_in(app, keys["bob"]["person"], landing="/console/connections")
    page = console.get("/console/connections")
    assert page.status_code == 200, page.text
    assert "not connected" in page.text and ">Connect</button>" in page.text


def test_each_user_connects_and_their_calls_carry_their_own_token_only(
    app: InProcess, keys: Any, world: OAuthWorld
) -> None:
    connect_headless(app, keys["alice"]["person"], "alice")
    assert text_of(call(app, keys["alice"]["agent"])) == "you are alice"
    assert call(app, keys["bob"]["agent"])["error"]["data"]["reason"] == "connection_required"
    assert search(app, keys["alice"]["agent"])[0]["connected"] is True
    assert search(app, keys["bob"]["agent"])[0]["connected"] is False
    connect_headless(app, keys["bob"]["person"], "bob")
    world.mcp_requests.clear()
    said = [text_of(call(app, keys[u]["agent"])) for u in ("alice", "bob", "alice", "bob")]
    assert said == ["you are alice", "you are bob", "you are alice", "you are bob"]
    assert world.calls_by() == ["alice", "bob", "alice", "bob"]  # each request: its caller's token
    # No answer carries a token: the listing shows status, scopes and expiry only.
    with api_as(app, keys["alice"]["person"]) as api:
        listing = ok(api.get("/connections"))["connections"]
    (mine,) = listing
    assert mine["toolkit"] == "acme" and mine["status"] == "connected" and "tools" in mine["scopes"]
    assert mine["expires_at"] > time.time()
    issued = [t for t, held in world.tokens.items() if held.user == "alice"]
    assert issued and not any(t in str(listing) for t in issued)
    with admin(app) as api:
        page = ok(api.get("/toolkits/acme/connections"))
    assert [c["user"] for c in page["connected"]] == ["alice", "bob"]
    assert not any(t in str(page) for t in world.tokens)


def test_every_users_tokens_are_among_the_redaction_needles(app: InProcess, world: OAuthWorld) -> None:
    needles = app.run(redaction.needles(app.rt))
    live = [t for t, held in world.tokens.items() if not held.revoked]
    assert live
    for token in live:
        assert Redactor(needles=(needles,)).text(f"echo {token}") == "echo [redacted]"


def test_an_expired_token_is_refreshed_on_the_401_with_no_failed_call(
    app: InProcess, keys: Any, world: OAuthWorld
) -> None:
    world.expire("alice")  # the server now refuses it; the appliance still thinks it valid
    world.grants.clear()
    assert text_of(call(app, keys["alice"]["agent"])) == "you are alice"
    assert world.grants == [("refresh_token", "alice")]
    row = query(
        app.data_dir,
        "SELECT status FROM user_connections WHERE user_id = ?",
        (user_id(app.data_dir, "alice"),),
    )
    assert row == [("connected",)]


def test_a_token_near_its_expiry_is_refreshed_before_the_call(
    app: InProcess, keys: Any, world: OAuthWorld
) -> None:
    world.lifetime_s = 30  # below the appliance's margin (60 s): due at once
    try:
        connect_headless(app, keys["bob"]["person"], "bob")
    finally:
        world.lifetime_s = 3600
    world.grants.clear()
    before = [u for m, u in world.mcp_requests if u is None]
    assert text_of(call(app, keys["bob"]["agent"])) == "you are bob"
    assert world.grants == [("refresh_token", "bob")]
    assert [u for m, u in world.mcp_requests if u is None] == before  # no refused request first


def test_a_failed_refresh_marks_only_that_users_connection(
    app: InProcess, keys: Any, world: OAuthWorld
) -> None:
    world.refuse_refresh.add("bob")
    world.expire("bob")
    try:
        failed = call(app, keys["bob"]["agent"])
        assert failed["result"]["isError"] is True
        sent = len(world.mcp_requests)
        again = call(app, keys["bob"]["agent"])["error"]
        assert again["data"]["reason"] == "connection_required" and "reconnect" in again["message"]
        assert len(world.mcp_requests) == sent  # refused before anything left
        assert text_of(call(app, keys["alice"]["agent"])) == "you are alice"  # alice unaffected
    finally:
        world.refuse_refresh.clear()
    with admin(app) as api:
        statuses = {c["user"]: c["status"] for c in ok(api.get("/toolkits/acme/connections"))["connected"]}
    assert statuses == {"alice": "connected", "bob": "needs_reconnect"}
    assert query(app.data_dir, "SELECT health FROM toolkits WHERE slug = 'acme'") == [("active",)]
    assert app.rt.health.get(kit_id(app)) is None or app.rt.health.get(kit_id(app)).health.value == "active"
    connect_headless(app, keys["bob"]["person"], "bob")  # reconnecting mends it
    assert text_of(call(app, keys["bob"]["agent"])) == "you are bob"


def kit_id(app: InProcess) -> int:
    return int(query(app.data_dir, "SELECT id FROM toolkits WHERE slug = 'acme'")[0][0])


def test_a_users_own_token_is_write_only_and_used_for_their_calls(
    app: InProcess, keys: Any, world: OAuthWorld
) -> None:
    with api_as(app, keys["carol"]["person"]) as api:
        shown = ok(api.put("/connections/acme", json={"scheme": "bearer", "token": CAROL_TOKEN}))
    assert shown["status"] == "connected" and shown["scheme"] == "bearer"
    assert CAROL_TOKEN not in str(shown)
    world.mcp_requests.clear()
    assert text_of(call(app, keys["carol"]["agent"])) == "you are carol"
    assert world.calls_by() == ["carol"]


def test_disconnect_revokes_at_the_authorization_server_and_deletes(
    app: InProcess, keys: Any, world: OAuthWorld
) -> None:
    with api_as(app, keys["alice"]["person"]) as api:
        done = ok(api.delete("/connections/acme"))
    assert done == {"toolkit": "acme", "project": "default", "disconnected": True, "revoked": True}
    assert "alice" in world.revoked
    assert not any(h.user == "alice" and not h.revoked for h in world.tokens.values())
    uid = user_id(app.data_dir, "alice")
    assert query(app.data_dir, "SELECT COUNT(*) FROM user_connections WHERE user_id = ?", (uid,)) == [(0,)]
    sent = len(world.mcp_requests)
    assert call(app, keys["alice"]["agent"])["error"]["data"]["reason"] == "connection_required"
    assert len(world.mcp_requests) == sent
    assert text_of(call(app, keys["bob"]["agent"])) == "you are bob"


def test_a_callback_with_an_unknown_state_changes_nothing(app: InProcess) -> None:
    with app.client(follow_redirects=False) as back:
        page = back.get("/oauth/callback", params={"code": "x", "state": "forged"})
    assert page.status_code == 400 and "unknown or expired" in page.text
    assert "location" not in page.headers


def test_the_connect_url_is_relative_without_a_public_url(app: InProcess) -> None:
    settings = app.rt.settings
    assert connections.connect_url(app.rt, "acme", "default").startswith(settings.public_url or "/console")


def cli(app: InProcess, *args: str, env: dict[str, str] | None = None) -> str:
    from click.testing import CliRunner

    from appliance.cli import main

    full = {
        "TOOLSPOKE_DATA_DIR": str(app.data_dir),
        "TOOLSPOKE_PUBLIC_URL": BASE_URL,
        "ALLOWED_TOOL_CIDRS": "127.0.0.1/32",
        **(env or {}),
    }
    done = CliRunner().invoke(main, list(args), env=full, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return done.stdout


def test_the_cli_prints_the_url_and_the_appliances_callback_finishes_it(
    app: InProcess, keys: Any, world: OAuthWorld
) -> None:
    url = cli(app, "connections", "connect", "acme", "--user", "alice").strip()
    with httpx.Client(follow_redirects=False, timeout=30, headers={"Cookie": "who=alice"}) as browser:
        location = browser.get(url).headers["location"]
    with app.client(follow_redirects=False) as back:
        assert back.get(location.removeprefix(BASE_URL)).status_code == 200
    assert text_of(call(app, keys["alice"]["agent"])) == "you are alice"
    listed = cli(app, "connections", "list", "--user", "alice")
    assert listed.startswith("default/acme: connected (oauth; tools")
    assert not any(t in listed for t in world.tokens)
    shown = cli(app, "connections", "mode", "acme")
    assert shown.strip() == (
        "default/acme: per_user; connected: alice (connected), bob (connected), carol (connected)"
    )
    token = "dave-cli-token-0123456789abcdef"
    world.static[token] = "dave"
    add_user_keys(app.data_dir, "dave", 1)
    said = cli(
        app,
        "connections",
        "connect",
        "acme",
        "--user",
        "dave",
        "--scheme",
        "bearer",
        "--from-env",
        "T",
        env={"T": token},
    )
    assert "connected (bearer" in said and token not in said
    assert "revoked and deleted" in cli(app, "connections", "disconnect", "acme", "--user", "alice")


def test_the_console_connects_in_the_persons_own_session_only(
    app: InProcess, keys: Any, world: OAuthWorld
) -> None:
    from tests.support.console_pages import signed_in

    console, csrf = signed_in(app, keys["bob"]["person"], landing="/console/connections")
    page = console.get("/console/connections?toolkit=acme&project=default")
    assert page.status_code == 200 and "acme" in page.text and "Disconnect" in page.text
    assert not any(t in page.text for t in world.tokens)
    started = console.post("/console/connections/default/acme/connect", data={"csrf": csrf})
    assert started.status_code == 200, started.text
    url = started.text.split('id="authorize" href="')[1].split('"')[0].replace("&amp;", "&")
    with httpx.Client(follow_redirects=False, timeout=30, headers={"Cookie": "who=bob"}) as browser:
        location = browser.get(url).headers["location"].removeprefix(BASE_URL)
    # The callback (no console cookie reaches it: SameSite=Strict, Path=/console) hands the
    # answer on to the console, where only the session that started it may finish it.
    with app.client(follow_redirects=False) as stranger:
        handed = stranger.get(location)
        assert handed.status_code == 200 and 'http-equiv="refresh"' in handed.text
        onward = handed.text.split('href="')[1].split('"')[0].replace("&amp;", "&")
        assert onward.startswith("/console/connections/finish?")
        assert stranger.get(onward).status_code in (302, 303)  # no session: off to sign in
    # Another person's session is refused, and the state is spent.
    other, _ = signed_in(app, keys["carol"]["person"], landing="/console/connections")
    refused = other.get(onward, follow_redirects=False)
    assert refused.status_code == 400 and "another console session" in refused.text
    assert console.get(onward, follow_redirects=False).status_code == 400
    started = console.post("/console/connections/default/acme/connect", data={"csrf": csrf})
    url = started.text.split('id="authorize" href="')[1].split('"')[0].replace("&amp;", "&")
    with httpx.Client(follow_redirects=False, timeout=30, headers={"Cookie": "who=bob"}) as browser:
        location = browser.get(url).headers["location"].removeprefix(BASE_URL)
    onward = console.get(location).text.split('href="')[1].split('"')[0].replace("&amp;", "&")
    back = console.get(onward, follow_redirects=False)
    assert back.status_code == 303 and back.headers["location"] == "/console/connections?connected=1"
    assert text_of(call(app, keys["bob"]["agent"])) == "you are bob"
    admin_console, _ = signed_in(app, app.key, landing="/console/toolkits/default/acme")
    kit_page = admin_console.get("/console/toolkits/default/acme")
    assert "Each person connects their own account" in kit_page.text and "bob" in kit_page.text
    assert not any(t in kit_page.text for t in world.tokens)


def test_a_per_user_toolkit_without_a_shared_credential_probes_healthy_on_the_servers_401(
    app: InProcess, world: OAuthWorld
) -> None:
    """A probe never borrows a person's token: the upstream's 401 (or 403) to a probe of a
    ``per_user`` toolkit says it is there and wants each person's own; a ``shared`` toolkit
    refused the same way is failing."""
    report = import_mcp(
        app,  # type: ignore[arg-type]
        world.mcp_url,
        "--slug",
        "beta",
        "--bearer-env",
        "OWNER_TOKEN",
        env={"OWNER_TOKEN": OWNER_TOKEN},
    )
    assert report["tool_count"] == 1
    with admin(app) as api:
        ok(api.put("/toolkits/beta/connection-mode", json={"mode": "per_user"}))
        assert ok(api.delete("/toolkits/beta/credentials"))["cleared"] is True
        sent = len(world.mcp_requests)
        for _ in range(3):  # past TOOLSPOKE_HEALTH_DEGRADED_AFTER (2) failures, were they any
            row = ok(api.post("/toolkits/beta/probe"))
        assert row["probed"] is True and row["health"] == "active", row
        probes = world.mcp_requests[sent:]
        assert probes and all(user is None for _, user in probes)  # each refused: no token was sent
        ok(api.put("/toolkits/beta/connection-mode", json={"mode": "shared"}))
        for _ in range(2):
            row = ok(api.post("/toolkits/beta/probe"))
        assert row["health"] == "degraded" and "HTTP 401" in row["reason"], row


def test_a_per_user_oauth_token_on_an_openapi_toolkit_is_refreshed_once_on_a_401(
    app: InProcess, keys: Any, world: OAuthWorld
) -> None:
    """alice's tokens are sealed here as the connect flow would seal them (that flow for
    OpenAPI toolkits is tests/web/test_connections_openapi.py); the call path is the product's."""
    from appliance.vault import connections as vault_conns
    from tests.support.oauth_world import openapi_spec

    with admin(app) as api:
        ok(api.post("/toolkits/openapi", json={"slug": "rest", "spec": openapi_spec(world)}), 201)
        ok(api.patch("/toolkits/rest/access", json={"visibility": "published"}))
        ok(api.put("/toolkits/rest/connection-mode", json={"mode": "per_user"}))
        (agent_id,) = query(app.data_dir, "SELECT id FROM agents WHERE name = 'alice-agent-0'")[0]
        ok(api.post("/grants", json={"agent_id": agent_id, "toolkit": "rest"}), 201)
    world.clients["client-rest"] = []
    issued = world._issue("alice", "client-rest")
    settings = {
        "issuer": world.base_url,
        "token_endpoint": f"{world.base_url}/token",
        "revocation_endpoint": f"{world.base_url}/revoke",
        "client_id": "client-rest",
        "auth_method": "none",
        "client_how": "dcr",
        "resource": f"{world.base_url}/api",
    }
    kit = int(query(app.data_dir, "SELECT id FROM toolkits WHERE slug = 'rest'")[0][0])

    async def seal() -> None:
        async with app.rt.db.write() as tx:
            await vault_conns.put(
                tx,
                app.rt.vault,
                kit,
                user_id(app.data_dir, "alice"),
                "oauth",
                settings,
                {"access_token": issued["access_token"], "refresh_token": issued["refresh_token"]},
                scopes=("tools",),
                expires_at=time.time() + 3600,
            )

    app.run(seal())
    rest = "rest__whoami"
    world.api_requests.clear()
    assert '"alice"' in text_of(call(app, keys["alice"]["agent"], rest))
    assert world.api_requests == ["alice"]
    world.expire("alice")  # the server refuses it now; the appliance thinks it good
    world.grants.clear()
    world.api_requests.clear()
    answer = call(app, keys["alice"]["agent"], rest)
    assert answer["result"]["isError"] is False and '"alice"' in text_of(answer)
    assert world.grants == [("refresh_token", "alice")]
    assert world.api_requests == [None, "alice"]  # refused once, refreshed, sent again
    # A refresh the server refuses: the 401 stands (sent once, not again) and alice's
    # connection needs reconnecting (the toolkit's health is not touched).
    world.refuse_refresh.add("alice")
    world.expire("alice")
    world.api_requests.clear()
    try:
        failed = call(app, keys["alice"]["agent"], rest)
    finally:
        world.refuse_refresh.clear()
    assert failed["result"]["isError"] is True
    assert world.api_requests == [None]
    again = call(app, keys["alice"]["agent"], rest)["error"]
    assert again["data"]["reason"] == "connection_required" and again["data"]["toolkit"] == "rest"
    rows = query(
        app.data_dir,
        "SELECT status FROM user_connections WHERE toolkit_id = ? AND user_id = ?",
        (kit, user_id(app.data_dir, "alice")),
    )
    assert rows == [("needs_reconnect",)]
    assert query(app.data_dir, "SELECT health FROM toolkits WHERE slug = 'rest'") == [("active",)]
