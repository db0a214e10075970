"""The admin API's toolkit credential routes (web/admin_credentials.py) and its MCP import
route, in process: a bad credential or import body is refused naming the field, shows none
of its secrets back, and stores nothing.

Moved from tests/e2e/test_credentials.py, which keeps the credentials' journey to real
upstreams through the SDK client.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import pytest

from tests.support.echo_upstream import EchoUpstream, echo_spec
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
