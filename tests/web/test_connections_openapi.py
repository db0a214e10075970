"""Connections (issue 19, item 4) in process: a ``per_user`` OpenAPI toolkit whose spec
declares an OAuth 2.0 ``authorizationCode`` flow, in front of the loopback OAuth world.

The spec (``tests/support/oauth_world.openapi_spec``) names the world's ``/authorize``,
``/token`` and a ``/refresh`` refreshUrl; there is no discovery. The toolkit's owner sets the
client registered there (a confidential one: its secret sealed, sent by Basic); alice
connects through the API's headless path (the authorization URL opened by a plain HTTP
client standing in for the browser, the redirect followed to the appliance's own
``/oauth/callback``); ``/api/whoami`` checks the token on every call. The tests run in
order on one appliance.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.support.accounts import add_agent_key, add_user_keys, credits_path, query, user_id
from tests.support.inprocess import BASE_URL, InProcess, served_in_process
from tests.support.oauth_world import OAuthWorld, oauth_world, openapi_spec
from tests.web.test_connections import admin, api_as, call, ok, text_of

pytestmark = pytest.mark.inprocess

CLIENT_ID = "spec-client"
CLIENT_SECRET = "spec-client-secret-0123456789abcdef"
TOOL = "rest__whoami"


@pytest.fixture(scope="module")
def world() -> Iterator[OAuthWorld]:
    with oauth_world() as w:
        w.clients[CLIENT_ID] = [f"{BASE_URL}/oauth/callback"]
        w.client_secrets[CLIENT_ID] = CLIENT_SECRET
        yield w


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, world: OAuthWorld) -> Iterator[InProcess]:
    env = {"TOOLSPOKE_PUBLIC_URL": BASE_URL}
    with served_in_process(tmp_path_factory.mktemp("connections-openapi") / "data", env=env) as served:
        spec = openapi_spec(world, refreshUrl=f"{world.base_url}/refresh")
        with admin(served) as api:
            ok(api.post("/toolkits/openapi", json={"slug": "rest", "spec": spec}), 201)
            ok(api.patch("/toolkits/rest/access", json={"visibility": "published"}))
            ok(api.put("/toolkits/rest/connection-mode", json={"mode": "per_user"}))
        yield served


@pytest.fixture(scope="module")
def keys(app: InProcess) -> dict[str, dict[str, str]]:
    out = {}
    for name in ("alice", "bob"):
        agent = add_user_keys(app.data_dir, name, 1, agents=True)[0]
        person = add_agent_key(app.data_dir, user_id(app.data_dir, name), None)  # type: ignore[arg-type]
        out[name] = {"person": person, "agent": agent}
        (agent_id,) = query(app.data_dir, "SELECT id FROM agents WHERE name = ?", (f"{name}-agent-0",))[0]
        with admin(app) as api:
            ok(api.post("/grants", json={"agent_id": agent_id, "toolkit": "rest"}), 201)
            ok(api.post(credits_path(app, name), json={"amount": 1000, "note": "test"}), 201)
    return out


def stored(app: InProcess, slug: str = "rest") -> list[Any]:
    return query(
        app.data_dir,
        "SELECT c.user_id FROM user_connections c JOIN toolkits k ON k.id = c.toolkit_id WHERE k.slug = ?",
        (slug,),
    )


def test_the_import_keeps_the_declared_flow_and_no_client_refuses_connecting(
    app: InProcess, keys: Any, world: OAuthWorld
) -> None:
    with admin(app) as api:
        shown = ok(api.get("/toolkits/rest/oauth-client"))
    assert shown["client"] is None
    assert shown["flow"] == {
        "authorization_url": f"{world.base_url}/authorize",
        "token_url": f"{world.base_url}/token",
        "refresh_url": f"{world.base_url}/refresh",
        "scopes": ["tools"],
    }
    with api_as(app, keys["alice"]["person"]) as api:
        (row,) = ok(api.get("/connections"))["connections"]
        assert row["schemes"][0] == "oauth"
        refused = api.post("/connections/rest")
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert "no OAuth client is set" in message and "--client-id" in message and "oauth-client" in message
    assert world.authorize_queries == [] and stored(app) == []
    assert query(app.data_dir, "SELECT COUNT(*) FROM oauth_pending") == [(0,)]


def test_the_owner_sets_the_client_and_its_secret_is_never_shown(app: InProcess) -> None:
    with api_as(app, add_user_keys(app.data_dir, "mallory", 1)[0]) as api:
        assert api.put("/toolkits/rest/oauth-client", json={"client_id": "x"}).status_code == 404
    with admin(app) as api:
        bad = api.put(
            "/toolkits/rest/oauth-client",
            json={"client_id": CLIENT_ID, "auth_method": "none", "client_secret": CLIENT_SECRET},
        )
        assert bad.status_code == 422, bad.text
        shown = ok(
            api.put(
                "/toolkits/rest/oauth-client", json={"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}
            )
        )
    assert shown["client"]["client_id"] == CLIENT_ID
    assert shown["client"]["auth_method"] == "client_secret_basic" and shown["client"]["client_secret_set"]
    assert CLIENT_SECRET not in str(shown)
    (blob,) = query(app.data_dir, "SELECT blob FROM oauth_clients")[0]
    assert CLIENT_SECRET.encode() not in bytes(blob)


def connect_headless(app: InProcess, key: str, who: str) -> dict[str, Any]:
    with api_as(app, key) as api:
        started = ok(api.post("/connections/rest"))
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


def test_a_user_connects_headless_and_their_calls_carry_their_token_only(
    app: InProcess, keys: Any, world: OAuthWorld
) -> None:
    world.token_paths.clear()
    started = connect_headless(app, keys["alice"]["person"], "alice")
    asked = parse_qs(urlsplit(started["authorization_url"]).query)
    assert started["authorization_url"].startswith(f"{world.base_url}/authorize?")
    assert asked["client_id"] == [CLIENT_ID] and asked["code_challenge_method"] == ["S256"]
    assert asked["scope"] == ["tools"] and "resource" not in asked and len(asked["state"][0]) >= 32
    assert world.token_paths == ["/token"]  # the code went to the spec's tokenUrl, Basic-authenticated
    world.api_requests.clear()
    assert '"alice"' in text_of(call(app, keys["alice"]["agent"], TOOL))
    assert world.api_requests == ["alice"]
    # bob has no connection: refused before anything leaves.
    answer = call(app, keys["bob"]["agent"], TOOL)
    assert answer["error"]["code"] == -32008, answer
    assert answer["error"]["data"]["reason"] == "connection_required"
    assert answer["error"]["data"]["toolkit"] == "rest"
    assert world.api_requests == ["alice"]
    with api_as(app, keys["alice"]["person"]) as api:
        listing = ok(api.get("/connections"))
    assert listing["connections"][0]["status"] == "connected"
    assert not any(t in str(listing) for t in world.tokens) and CLIENT_SECRET not in str(listing)


def test_a_401_refreshes_at_the_specs_refresh_url(app: InProcess, keys: Any, world: OAuthWorld) -> None:
    world.expire("alice")
    world.token_paths.clear()
    world.api_requests.clear()
    world.grants.clear()
    assert '"alice"' in text_of(call(app, keys["alice"]["agent"], TOOL))
    assert world.token_paths == ["/refresh"] and world.grants == [("refresh_token", "alice")]
    assert world.api_requests == [None, "alice"]


@pytest.mark.parametrize(
    ("urls", "field", "said"),
    [
        ({"authorizationUrl": "http://169.254.169.254/authorize"}, "authorization_url", "link-local"),
        ({"tokenUrl": "https://10.0.0.7/token"}, "token_url", "private"),
        ({"refreshUrl": "http://[::1]/refresh"}, "refresh_url", "loopback"),
        ({"tokenUrl": "http://oauth.example.com/token"}, "token_url", "must use https"),
    ],
)
def test_a_spec_naming_internal_or_plain_http_endpoints_is_refused_at_connect(
    app: InProcess, keys: Any, world: OAuthWorld, urls: dict[str, str], field: str, said: str
) -> None:
    slug = f"hostile-{field.replace('_', '-')}-{len(said)}"
    with admin(app) as api:
        ok(api.post("/toolkits/openapi", json={"slug": slug, "spec": openapi_spec(world, **urls)}), 201)
        ok(api.patch(f"/toolkits/{slug}/access", json={"visibility": "published"}))
        ok(api.put(f"/toolkits/{slug}/connection-mode", json={"mode": "per_user"}))
        ok(api.put(f"/toolkits/{slug}/oauth-client", json={"client_id": CLIENT_ID}))
    before = len(world.authorize_queries), len(world.token_paths)
    with api_as(app, keys["alice"]["person"]) as api:
        refused = api.post(f"/connections/{slug}")
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["field"] == field and said in error["message"] and "nothing was stored" in error["message"]
    assert (len(world.authorize_queries), len(world.token_paths)) == before
    assert stored(app, slug) == []
    assert query(app.data_dir, "SELECT COUNT(*) FROM oauth_pending") == [(0,)]


def test_the_cli_shows_sets_and_clears_the_client_never_printing_the_secret(app: InProcess) -> None:
    from tests.web.test_connections import cli

    said = cli(app, "connections", "client", "rest")
    assert said.startswith(f"default/rest: OAuth client {CLIENT_ID} (client_secret_basic, secret set)")
    other = "other-secret-0123456789abcdef"
    said = cli(
        app, "connections", "client", "rest", "--client-id", "c2", "--secret-env", "S", env={"S": other}
    )
    assert "c2 (client_secret_basic, secret set)" in said and other not in said
    assert "cleared" in cli(app, "connections", "client", "rest", "--clear")
    assert "OAuth client not set" in cli(app, "connections", "client", "rest")


def test_vault_rotation_reseals_the_clients(app: InProcess) -> None:
    from appliance.vault import connections as vault_conns
    from appliance.vault import store as vault_store

    with admin(app) as api:
        ok(
            api.put(
                "/toolkits/rest/oauth-client", json={"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}
            )
        )
    (old,) = query(app.data_dir, "SELECT key_version FROM oauth_clients")[0]
    done = app.run(vault_store.rotate(app.rt.db, app.rt.vault))
    assert set(query(app.data_dir, "SELECT key_version FROM oauth_clients")) == {(done["version"],)}
    kit = int(query(app.data_dir, "SELECT id FROM toolkits WHERE slug = 'rest'")[0][0])

    async def opened() -> Any:
        async with app.rt.db.read() as conn:
            return await vault_conns.get_client(conn, app.rt.vault, kit)

    assert app.run(opened())[1] == CLIENT_SECRET
    assert old != done["version"]
