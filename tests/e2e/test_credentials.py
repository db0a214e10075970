"""Toolkit credentials end to end: a real ``toolspoke serve``, the SDK client, real upstreams.

The upstreams echo what they receive (``tests/support/echo_upstream.py``, the reference MCP
server's ``echo_headers``), so each test can check both sides: the credential reached the
upstream where its scheme puts it, and nothing the agent or the owner reads shows it again.
Here stays what needs the process: a restart, its log, a remote MCP server, the CLI; each
scheme, a refused refresh and who may manage a credential are tested in process
(tests/web/test_admin_credentials.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.support.clients import call_once, connect, result_text
from tests.support.echo_upstream import EchoUpstream, echo_spec, oauth_body
from tests.support.peers import UPSTREAM, free_port, peer
from tests.support.servers import Appliance, cli, running_appliance

pytestmark = pytest.mark.e2e


def canary(tag: str = "") -> str:
    return f"CANARY{tag}-{secrets.token_hex(16)}"


def forms(value: str) -> list[str]:
    """The forms a leak could take: plain, URL-encoded, base64 and hex."""
    raw = value.encode()
    return [value, quote(value, safe=""), base64.b64encode(raw).decode().rstrip("="), raw.hex()]


def assert_absent(text: str, *values: str) -> None:
    for value in values:
        for form in forms(value):
            assert form not in text, f"a form of a secret leaked: {form[:12]}…"


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=90))


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoUpstream]:
    with EchoUpstream(client_secret=canary("CS"), refresh_token=canary("RT")) as upstream:
        yield upstream


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    # Every test here imports its own toolkits as the admin: lift the hourly import limit.
    env = {"TOOLSPOKE_DEMO": "0", "TOOLSPOKE_IMPORTS_PER_HOUR": "1000"}
    with running_appliance(tmp_path_factory.mktemp("creds") / "data", env=env) as running:
        yield running


@pytest.fixture
def api(app: Appliance) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=app.base_url, headers={"Authorization": f"Bearer {app.key}"}, timeout=60) as c:
        yield c


def import_echo(api: httpx.Client, echo: EchoUpstream, slug: str) -> None:
    r = api.post("/api/v1/toolkits/openapi", json={"slug": slug, "spec": echo_spec(echo.base_url)})
    assert r.status_code == 201, r.text


def test_an_oauth_client_refreshes_once_caches_the_token_refreshes_on_401_and_keeps_the_rotated_refresh_token(
    tmp_path: Path, echo: EchoUpstream
) -> None:
    first_refresh = echo.refresh_token
    with (
        running_appliance(tmp_path / "data", env={"TOOLSPOKE_DEMO": "0"}) as app,
        httpx.Client(
            base_url=app.base_url, headers={"Authorization": f"Bearer {app.key}"}, timeout=60
        ) as api,
    ):
        import_echo(api, echo, "oauth")
        r = api.put("/api/v1/toolkits/oauth/credentials", json=oauth_body(echo, first_refresh))
        assert r.status_code == 200, r.text
        assert r.json()["settings"]["token_url"].endswith("/oauth/token")
        assert_absent(r.text, first_refresh, echo.client_secret)

        refreshes = echo.refreshes
        one = run(call_once(app, "oauth__private"))
        assert one.is_error is False, one
        assert echo.refreshes == refreshes + 1
        two = run(call_once(app, "oauth__private"))
        assert two.is_error is False and echo.refreshes == refreshes + 1  # cached, not refreshed
        echo.revoke()
        before = len(echo.requests)
        three = run(call_once(app, "oauth__private"))
        assert three.is_error is False, three
        assert echo.refreshes == refreshes + 2  # one refresh after the 401, then success
        paths = [(q.method, q.path) for q in echo.requests[before:]]
        assert paths == [("GET", "/api/private"), ("POST", "/oauth/token"), ("GET", "/api/private")]
        for result in (one, two, three):
            assert_absent(result_text(result), echo.access_token, first_refresh, echo.refresh_token)
        log = "".join(app.output)
    assert_absent(log, first_refresh, echo.refresh_token, echo.client_secret, echo.access_token)
    # A restarted appliance has no cached token: it must refresh with the rotated refresh
    # token it sealed, since the server accepts only the newest one.
    with running_appliance(tmp_path / "data", env={"TOOLSPOKE_DEMO": "0"}) as app:
        again = run(call_once(app, "oauth__private"))
        assert again.is_error is False, again
        assert echo.refreshes == refreshes + 3


def test_a_remote_mcp_server_behind_a_bearer_token_is_imported_through_the_admin_api(
    app: Appliance, api: httpx.Client, tmp_path: Path
) -> None:
    token, port = canary("MCP"), free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    argv = [
        sys.executable,
        str(UPSTREAM),
        "--port",
        str(port),
        "--transport",
        "streamable-http",
        "--bearer",
        token,
    ]
    with peer(argv, port, tmp_path / "upstream.log"):
        refused = api.post("/api/v1/toolkits/mcp", json={"slug": "guarded", "url": url, "dry_run": True})
        assert refused.status_code == 502, refused.text
        assert "rejected the credentials" in refused.json()["error"]["message"]
        auth = {"scheme": "bearer", "token": token}
        dry = api.post(
            "/api/v1/toolkits/mcp", json={"slug": "guarded", "url": url, "dry_run": True, "auth": auth}
        )
        assert dry.status_code == 200, dry.text
        assert "echo_headers" in {t["name"].split("__")[1] for t in dry.json()["tools"]}
        assert api.get("/api/v1/toolkits/guarded/credentials").status_code == 404  # dry run: nothing stored
        done = api.post("/api/v1/toolkits/mcp", json={"slug": "guarded", "url": url, "auth": auth})
        assert done.status_code == 201, done.text
        assert_absent(done.text + dry.text, token)
        shown = api.get("/api/v1/toolkits/guarded/credentials").json()
        assert shown["set"] is True and shown["scheme"] == "bearer"
        assert_absent(json.dumps(shown), token)

        async def scenario() -> None:
            async with connect(app) as client:
                ok = await client.call_tool("guarded__read_item", {"key": "hello"})
                assert ok.is_error is False and ok.content[0].text == "world"
                echoed = await client.call_tool("guarded__echo_headers", {})
                assert echoed.is_error is False
                text = result_text(echoed)
                assert "[redacted]" in text  # the server saw our header and said so
                assert_absent(text, token)

        run(scenario())
        # The stored connection holds no secret: it is safe to show an owner.
        listed = api.get("/api/v1/toolkits").text
        assert_absent(listed, token)
        # The CLI takes the token from an environment variable, never from argv.
        loopback = {"ALLOWED_TOOL_CIDRS": "127.0.0.1/32", "GUARD_TOKEN": token}
        dry = cli(app.data_dir, "import", "mcp", url, "--slug", "by-cli", "--bearer-env", "GUARD_TOKEN",
                  "--dry-run", "--json", env=loopback)  # fmt: skip
        assert dry.returncode == 0, dry.stderr
        assert "credential (bearer) checked" in json.loads(dry.stdout)["notes"]
        assert_absent(dry.stdout + dry.stderr, token)
        without = cli(app.data_dir, "import", "mcp", url, "--slug", "by-cli", "--dry-run", env=loopback)
        assert without.returncode == 1 and "rejected the credentials" in without.stderr


def test_the_cli_takes_secrets_from_the_environment_or_stdin_never_argv_and_shows_only_metadata(
    tmp_path: Path, echo: EchoUpstream
) -> None:
    """VAULT-01 / VAULT-08: secrets never in argv; listings show metadata only."""
    data = tmp_path / "data"
    spec = tmp_path / "echo.json"
    spec.write_text(json.dumps(echo_spec(echo.base_url)))
    loopback = {"ALLOWED_TOOL_CIDRS": "127.0.0.1/32"}
    assert cli(data, "import", "openapi", str(spec), "--slug", "echo", env=loopback).returncode == 0
    secret = canary("CLI")
    done = cli(
        data,
        "credentials",
        "set",
        "echo",
        "--scheme",
        "bearer",
        "--from-env",
        "MY_TOKEN",
        env={"MY_TOKEN": secret},
    )
    assert done.returncode == 0, done.stderr
    assert "bearer credential set" in done.stdout
    shown = cli(data, "credentials", "show", "echo", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["scheme"] == "bearer"
    assert_absent(done.stdout + done.stderr + shown.stdout + shown.stderr, secret)
    missing = cli(data, "credentials", "set", "echo", "--scheme", "bearer")
    assert missing.returncode == 2 and "--from-env VAR or --stdin" in missing.stderr
    unset = cli(data, "credentials", "set", "echo", "--scheme", "bearer", "--from-env", "NOT_SET_ANYWHERE")
    assert unset.returncode == 2 and "NOT_SET_ANYWHERE" in unset.stderr
    # stdin, then a call with the CLI: the upstream gets the new value.
    other = canary("STDIN")
    import subprocess

    piped = subprocess.run(
        [sys.executable, "-m", "appliance", "credentials", "set", "echo", "--scheme", "header", "--stdin"],
        input=other + "\n",
        capture_output=True,
        text=True,
        env={**os.environ, "TOOLSPOKE_DATA_DIR": str(data), "ALLOWED_TOOL_CIDRS": "127.0.0.1/32"},
        timeout=60,
        check=False,
    )
    assert piped.returncode == 0, piped.stderr
    before = len(echo.requests)
    called = cli(data, "call", "echo__echo", "--json", env=loopback)
    assert called.returncode == 0, called.stderr
    assert echo.requests[before].headers["x-api-key"] == other
    assert_absent(called.stdout + called.stderr, other)
    cleared = cli(data, "credentials", "clear", "echo")
    assert cleared.returncode == 0 and "credential cleared" in cleared.stdout
    assert json.loads(cli(data, "credentials", "show", "echo", "--json").stdout)["set"] is False
