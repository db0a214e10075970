"""Stored credentials never come back through an upstream (issue 16 item 3), end to end.

A real ``toolspoke serve`` and a real MCP server (``tests/support/leaky_upstream.py``) that
quotes, in every answer, the ``Authorization`` header it was sent and a text holding two
vault secrets in every encoding (``tests/support/leaks.py``): its own toolkit's token and
another toolkit's credential, which it should not even know. Through a failing import
(admin API and CLI, dry run too), a successful one (the tool descriptions it stores), calls
(a result, an ``isError`` result, a JSON-RPC error) and a failing sync (admin API and CLI),
no answer, CLI output, stored tool or log line of the server shows either secret in any
encoding; the call's audit row says how many values were redacted.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.clients import connect
from tests.support.leaks import assert_no_leak, leak_text
from tests.support.peers import ROOT, free_port, peer
from tests.support.servers import Appliance, cli, running_appliance
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e

LEAKY = ROOT / "tests" / "support" / "leaky_upstream.py"
OWN = "OWN-" + secrets.token_urlsafe(24)  # the leaky toolkit's bearer token
OTHER = "OTHER-" + secrets.token_urlsafe(24)  # another toolkit's credential, in the same vault


class Upstream:
    def __init__(self, control: Path, url: str) -> None:
        self.control, self.url = control, url

    def set(self, *, fail_list: bool) -> None:
        self.control.write_text(json.dumps({"leak": leak_text(OWN, OTHER), "fail_list": fail_list}))


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    where = tmp_path_factory.mktemp("leaky")
    port = free_port()
    state = Upstream(where / "leak.json", f"http://127.0.0.1:{port}/mcp")
    state.set(fail_list=True)
    argv = [sys.executable, str(LEAKY), "--port", str(port)]
    with peer(argv, port, where / "upstream.log", env={"LEAK_FILE": str(state.control)}):
        yield state


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    env = {"TOOLSPOKE_DEMO": "0", "TOOLSPOKE_IMPORTS_PER_HOUR": "1000", "TOOLSPOKE_LOG_LEVEL": "DEBUG"}
    with running_appliance(tmp_path_factory.mktemp("redact") / "data", env=env) as running:
        yield running


@pytest.fixture(scope="module")
def api(app: Appliance) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=app.base_url, headers={"Authorization": f"Bearer {app.key}"}, timeout=60) as c:
        # Another toolkit's credential: the leaky upstream quotes it too.
        spec = {
            "openapi": "3.0.3",
            "info": {"title": "other", "version": "1"},
            "servers": [{"url": "http://127.0.0.1:9/"}],
            "paths": {"/x": {"get": {"operationId": "x", "responses": {"200": {"description": "ok"}}}}},
        }
        r = c.post("/api/v1/toolkits/openapi", json={"slug": "other", "spec": spec})
        assert r.status_code == 201, r.text
        r = c.put("/api/v1/toolkits/other/credentials", json={"scheme": "bearer", "token": OTHER})
        assert r.status_code == 200, r.text
        yield c


def import_body(upstream: Upstream, slug: str, **extra: Any) -> dict[str, Any]:
    return {"slug": slug, "url": upstream.url, "auth": {"scheme": "bearer", "token": OWN}, **extra}


def cli_import(app: Appliance, upstream: Upstream, slug: str, *extra: str) -> Any:
    env = {"ALLOWED_TOOL_CIDRS": "127.0.0.1/32", "LEAKY_TOKEN": OWN}
    args = ["import", "mcp", upstream.url, "--slug", slug, "--bearer-env", "LEAKY_TOKEN", *extra]
    return cli(app.data_dir, *args, env=env, timeout=120)


def test_a_failing_import_quoting_the_secrets_shows_neither_in_the_api_or_the_cli(
    app: Appliance, api: httpx.Client, upstream: Upstream
) -> None:
    upstream.set(fail_list=True)
    for extra in ({}, {"dry_run": True}):
        r = api.post("/api/v1/toolkits/mcp", json=import_body(upstream, "leaky-api", **extra))
        assert r.status_code >= 400, r.text
        assert "revoked" in r.text  # the upstream's words are passed on, its secrets are not
        assert_no_leak(r.text, OWN, OTHER, where=f"in the import answer {extra}")
    for extra in ((), ("--dry-run",)):
        done = cli_import(app, upstream, "leaky-cli", *extra)
        assert done.returncode != 0, done.stdout
        assert "revoked" in done.stdout + done.stderr
        assert_no_leak(done.stdout + done.stderr, OWN, OTHER, where=f"in `toolspoke import mcp {extra}`")


def test_a_stored_listing_calls_and_a_failing_sync_never_show_a_secret(
    app: Appliance, api: httpx.Client, upstream: Upstream
) -> None:
    upstream.set(fail_list=False)
    dry = cli_import(app, upstream, "leaky-dry", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert_no_leak(dry.stdout + dry.stderr, OWN, OTHER, where="in a dry run")
    r = api.post("/api/v1/toolkits/mcp", json=import_body(upstream, "leaky"))
    assert r.status_code == 201, r.text
    assert_no_leak(r.text, OWN, OTHER, where="in the import report")
    with sqlite3.connect(app.data_dir / "toolspoke.db") as db:
        stored = json.dumps(db.execute("SELECT description, input_schema FROM tools").fetchall())
    assert "revoked" in stored
    assert_no_leak(stored, OWN, OTHER, where="in the stored tool descriptions")

    async def calls() -> list[Any]:
        async with connect(app, "/mcp/leaky") as client:
            return [await client.call_tool("echo", {"mode": m}) for m in ("ok", "refuse", "explode")]

    for result in asyncio.run(asyncio.wait_for(calls(), timeout=90)):
        shown = json.dumps(result.model_dump(mode="json", by_alias=True))
        assert "revoked" in shown
        assert_no_leak(shown, OWN, OTHER, where="in a call's answer")

    rows = api.get("/api/v1/toolkits/leaky/calls").json()["calls"]
    assert len(rows) == 3 and all(row["redacted"] > 0 for row in rows), rows
    ok = next(row for row in rows if row["outcome"] == "ok")
    assert ok["reason"] == "secret_redacted"

    upstream.set(fail_list=True)
    r = api.post("/api/v1/toolkits/leaky/sync")
    assert r.status_code >= 400 and "revoked" in r.text, r.text
    assert_no_leak(r.text, OWN, OTHER, where="in the sync answer")
    done = cli(app.data_dir, "sync", "leaky", env={"ALLOWED_TOOL_CIDRS": "127.0.0.1/32"}, timeout=120)
    assert done.returncode != 0 and "revoked" in done.stdout + done.stderr, done.stdout
    assert_no_leak(done.stdout + done.stderr, OWN, OTHER, where="in `toolspoke sync`")

    # The failed sync was logged with the upstream's words, its secrets were not. The serve's
    # log thread writes after the API has answered: wait for the line (once seen missing).
    wait_for(
        "the serve's log line of the failed sync",
        lambda: any("sync of default/leaky failed" in line and "revoked" in line for line in app.output),
    )
    log = "".join(app.output)
    assert_no_leak(log, OWN, OTHER, where="in the server's log")
