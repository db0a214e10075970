"""The admin API's toolkit credential routes (web/admin_credentials.py) and its MCP import
route, in process: a bad credential or import body is refused naming the field, shows none
of its secrets back, and stores nothing; a stored credential reaches the upstream (which
echoes what it receives, ``tests/support/echo_upstream.py``) where its scheme puts it, and
nothing the agent or the owner reads shows it again.

Moved from tests/e2e/test_credentials.py, which keeps on a real ``toolspoke serve`` an OAuth
token refreshed, rotated and sealed across a restart (its log checked too), a remote MCP
server behind a bearer token, and the CLI taking secrets as a process.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.clients import call_once, result_text
from tests.support.echo_upstream import EchoUpstream, echo_spec, oauth_body
from tests.support.inprocess import InProcess, served_in_process
from tests.support.leaks import assert_no_leak

pytestmark = pytest.mark.inprocess


def canary(tag: str = "") -> str:
    return f"CANARY{tag}-{secrets.token_hex(16)}"


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoUpstream]:
    with EchoUpstream(client_secret=canary("CS"), refresh_token=canary("RT")) as upstream:
        yield upstream


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    env = {"TOOLSPOKE_DEMO": "0", "TOOLSPOKE_IMPORTS_PER_HOUR": "1000"}
    with served_in_process(tmp_path_factory.mktemp("creds") / "data", env=env) as served:
        yield served


@pytest.fixture
def api(app: InProcess) -> Iterator[httpx.Client]:
    with app.client(headers={"Authorization": f"Bearer {app.key}"}, timeout=60) as c:
        yield c


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=90))


def import_echo(api: httpx.Client, echo: EchoUpstream, slug: str) -> None:
    r = api.post("/api/v1/toolkits/openapi", json={"slug": slug, "spec": echo_spec(echo.base_url)})
    assert r.status_code == 201, r.text


def test_credentials_are_refused_with_the_field_named_and_nothing_is_stored(
    api: httpx.Client, echo: EchoUpstream
) -> None:
    import_echo(api, echo, "echo-bad")
    cases = [
        ({"scheme": "magic"}, "scheme"),
        ({"scheme": "bearer"}, "token"),
        ({"scheme": "bearer", "token": "short"}, "token"),
        ({"scheme": "bearer", "token": "line\nbreak-token"}, "token"),
        ({"scheme": "header", "name": "Host", "value": canary()}, "name"),
        ({"scheme": "header", "name": "bad name", "value": canary()}, "name"),
        ({"scheme": "env", "env": {"X": canary()}}, "scheme"),
        (
            {
                "scheme": "oauth2",
                "token_url": "http://169.254.169.254/token",
                "client_id": "c",
                "refresh_token": canary(),
            },
            "token_url",
        ),
        (
            {
                "scheme": "oauth2",
                "token_url": "file:///etc/passwd",
                "client_id": "c",
                "refresh_token": canary(),
            },
            "token_url",
        ),
    ]
    for body, field in cases:
        r = api.put("/api/v1/toolkits/echo-bad/credentials", json=body)
        assert r.status_code == 422, (body, r.text)
        error = r.json()["error"]
        assert error["field"] == field, (body, error)
        assert "Traceback" not in r.text
        assert_no_leak(r.text, *(v for v in body.values() if isinstance(v, str) and v.startswith("CANARY")))
    assert api.get("/api/v1/toolkits/echo-bad/credentials").json()["set"] is False
    assert (
        api.put("/api/v1/toolkits/nope/credentials", json={"scheme": "bearer", "token": canary()}).status_code
        == 404
    )


def test_the_admin_mcp_import_refuses_bad_bodies_and_guarded_urls_naming_the_field(api: httpx.Client) -> None:
    """SSRF-01 / SSRF-07: a remote MCP URL to an internal address is refused naming the field."""
    for body, status, field in [
        ({"url": "http://example.com/mcp"}, 422, "slug"),
        ({"slug": "x", "url": "ftp://example.com/mcp"}, 422, "url"),
        ({"slug": "x", "url": "http://169.254.169.254/mcp"}, 422, "url"),
        ({"slug": "x", "url": "http://127.0.0.1:9/mcp", "transport": "stdio"}, 422, "transport"),
        (
            {
                "slug": "x",
                "url": "http://127.0.0.1:9/mcp",
                "auth": {"scheme": "query", "name": "k", "value": "abcdefgh"},
            },
            422,
            "scheme",
        ),
        ({"slug": "x", "url": "http://127.0.0.1:9/mcp", "dry_run": "yes"}, 422, "dry_run"),
    ]:
        r = api.post("/api/v1/toolkits/mcp", json=body)
        assert r.status_code == status, (body, r.text)
        assert r.json()["error"]["field"] == field, (body, r.text)
        assert "Traceback" not in r.text


@pytest.mark.parametrize(
    ("scheme", "where"),
    [
        ("bearer", "authorization"),
        ("header", "x-api-key"),
        ("query", "api_key"),
        ("cookie", "cookie"),
        ("basic", "authorization"),
    ],
)
def test_each_scheme_puts_the_vault_credential_where_it_belongs_and_its_echo_comes_back_redacted(
    app: InProcess, api: httpx.Client, echo: EchoUpstream, scheme: str, where: str
) -> None:
    """VAULT-01 / I-4: each scheme's echo comes back redacted."""
    slug = f"echo-{scheme}"
    import_echo(api, echo, slug)
    secret, user = canary(), "bot-" + secrets.token_hex(4)
    body: dict[str, Any] = {"scheme": scheme}
    if scheme == "bearer":
        body["token"] = secret
    elif scheme == "basic":
        body.update(username=user, password=secret)
    else:
        body["value"] = secret  # the name comes from the spec's apiKey scheme for that place
    r = api.put(f"/api/v1/toolkits/{slug}/credentials", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["set"] is True and r.json()["scheme"] == scheme
    assert_no_leak(r.text, secret)

    before = len(echo.requests)
    # The spec's credential parameter is not an input: an agent cannot set it itself.
    refused = run(call_once(app, f"{slug}__echo", {"X-Api-Key": "agent-chosen-value"}))
    assert refused.is_error is True and refused.meta["toolspoke/field"] == "/X-Api-Key"
    result = run(call_once(app, f"{slug}__echo", {"q": "hi", "X-Note": "from-the-agent"}))
    sent = echo.requests[before:]
    assert len(sent) == 1, result
    expected = {
        "bearer": lambda: sent[0].headers["authorization"] == f"Bearer {secret}",
        "header": lambda: sent[0].headers["x-api-key"] == secret,
        "query": lambda: sent[0].query["api_key"] == [secret] and sent[0].query["q"] == ["hi"],
        "cookie": lambda: f"session={secret}" in sent[0].headers["cookie"],
        "basic": lambda: (
            sent[0].headers["authorization"]
            == "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()
        ),
    }[scheme]
    assert expected(), sent[0]
    assert sent[0].headers["x-note"] == "from-the-agent"
    assert result.is_error is False
    shown = result_text(result)
    assert "[redacted]" in shown
    assert_no_leak(shown, secret, f"{user}:{secret}")

    listed = api.get(f"/api/v1/toolkits/{slug}/credentials")
    assert listed.status_code == 200 and listed.json()["set"] is True
    assert set(listed.json()) == {
        "toolkit",
        "project",
        "set",
        "scheme",
        "settings",
        "key_version",
        "created_at",
        "updated_at",
    }
    assert_no_leak(listed.text, secret)


def test_a_refused_refresh_is_credential_unavailable_without_quoting_the_token_endpoint(
    app: InProcess, api: httpx.Client, echo: EchoUpstream
) -> None:
    import_echo(api, echo, "oauth-bad")
    wrong = canary("WRONG")
    r = api.put("/api/v1/toolkits/oauth-bad/credentials", json=oauth_body(echo, wrong, client_auth="post"))
    assert r.status_code == 200, r.text
    before = len(echo.requests)
    result = run(call_once(app, "oauth-bad__private"))
    assert result.is_error is True
    assert result.meta is None or "CANARY" not in json.dumps(result.meta)
    text = result_text(result)
    assert "invalid_grant" in text and "HTTP 400" in text
    assert_no_leak(text, wrong, echo.client_secret)
    # Only the token endpoint was asked: nothing was sent to the API without a token.
    assert [q.path for q in echo.requests[before:]] == ["/oauth/token"]


def test_only_a_toolkits_owner_or_an_admin_manages_its_credential_and_agents_never(
    app: InProcess, api: httpx.Client, echo: EchoUpstream
) -> None:
    import_echo(api, echo, "echo-owned")
    secret = canary("OWN")
    assert (
        api.put(
            "/api/v1/toolkits/echo-owned/credentials", json={"scheme": "bearer", "token": secret}
        ).status_code
        == 200
    )
    uid = api.post("/api/v1/users", json={"name": "mallory"}).json()["id"]
    user_key = api.post("/api/v1/keys", json={"user_id": uid}).json()["key"]
    with app.client(headers={"Authorization": f"Bearer {user_key}"}, timeout=60) as other:
        for method, path, body in (
            ("GET", "/api/v1/toolkits/echo-owned/credentials", None),
            ("PUT", "/api/v1/toolkits/echo-owned/credentials", {"scheme": "bearer", "token": canary()}),
            ("DELETE", "/api/v1/toolkits/echo-owned/credentials", None),
            ("PUT", "/api/v1/toolkits/echo-owned/limits", {"max_response_bytes": 1}),
        ):
            r = other.request(method, path, json=body)
            assert r.status_code == 404, (method, path, r.text)  # as if it did not exist
            assert_no_leak(r.text, secret)
        # Their own toolkit is theirs to manage.
        mine = other.post(
            "/api/v1/toolkits/openapi", json={"slug": "mallorys", "spec": echo_spec(echo.base_url)}
        )
        assert mine.status_code == 201, mine.text
        r = other.put("/api/v1/toolkits/mallorys/credentials", json={"scheme": "bearer", "token": canary()})
        assert r.status_code == 200 and r.json()["set"] is True
    agent = api.post("/api/v1/agents", json={"name": "bot"}).json()["id"]
    agent_key = api.post("/api/v1/keys", json={"agent_id": agent}).json()["key"]
    r = app.request(
        "GET",
        "/api/v1/toolkits/echo-owned/credentials",
        headers={"Authorization": f"Bearer {agent_key}"},
        timeout=60,
    )
    assert r.status_code in (401, 403), r.text
    # the owner's credential is untouched by all of that
    assert api.get("/api/v1/toolkits/echo-owned/credentials").json()["updated_at"]
    before = len(echo.requests)
    assert run(call_once(app, "echo-owned__echo")).is_error is False
    assert echo.requests[before].headers["authorization"] == f"Bearer {secret}"
