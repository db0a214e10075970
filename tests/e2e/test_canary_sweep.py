"""A canary sweep: a unique secret stored as a credential of every kind the vault holds, used,
failed, imported and synced, and then looked for everywhere, in every encoding.

Kinds: OpenAPI bearer, API key in a header, in the query, in a cookie, Basic (user:password),
OAuth refresh token and client secret (and the access tokens they buy), remote MCP bearer and
API-key header (admin API and CLI imports), and a stdio server's vault-held environment
variable. The upstreams leak on purpose: they echo what they received in successful results,
in errors, in OAuth refusals, in import and sync failures and (stdio) on stderr.

Places: every answer of the admin API and of /mcp, every CLI output, ``serve``'s log (at
DEBUG), ``/metrics``, a backup downloaded and one written by the CLI, and the raw bytes of the
database, its ``-wal`` and ``-shm`` (while serving and after). Forms: ``tests/support/canary.py``
(exact, half, URL-encoded, JSON-escaped, hex, base64 std/url-safe at every alignment).
Every find is collected, and the test fails listing them all.
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.canary import CanaryHttpUpstream, CanaryMcpUpstream, Sweep
from tests.support.clients import modern_tools_call
from tests.support.servers import REPO, Appliance, cli, running_appliance

pytestmark = pytest.mark.e2e
STDIO_SERVER = REPO / "tests" / "support" / "canary_stdio.py"
LOOPBACK = {"ALLOWED_TOOL_CIDRS": "127.0.0.1/32"}


def database_files(data: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(data.iterdir()) if p.name.startswith("toolspoke.db")}


# Longer than the suite's 30 s, like the fuzz: one serve, three upstreams and a dozen CLI
# processes in one sweep took 59 s on a loaded two-core machine, where 30 s cut it off and
# `make test` failed on a sweep that found nothing.
@pytest.mark.timeout(150)
def test_no_stored_credential_leaks_in_any_answer_log_file_or_encoding(tmp_path: Path) -> None:
    sweep = Sweep()
    user = "bot-" + secrets.token_hex(3)
    bearer, header, query, cookie = (sweep.add(k) for k in ("BEARER", "HEADER", "QUERY", "COOKIE"))
    password, refresh, client_secret = sweep.add("BASIC"), sweep.add("OAUTHRT"), sweep.add("OAUTHCS")
    mcp_bearer, mcp_key, mcp_cli = sweep.add("MCPBEARER"), sweep.add("MCPKEY"), sweep.add("MCPCLI")
    env_secret = sweep.add("STDIOENV")
    data = tmp_path / "data"
    env = {
        "TOOLSPOKE_DEMO": "0",
        "TOOLSPOKE_IMPORTS_PER_HOUR": "1000",
        "TOOLSPOKE_LOG_LEVEL": "DEBUG",  # an operator chasing a problem must not be handed secrets
    }
    seen: list[tuple[str, str]] = []  # (where, text) of everything anyone was shown

    def keep(where: str, r: httpx.Response) -> httpx.Response:
        seen.append((f"{where} -> {r.status_code}", r.text))
        return r

    def run_cli(where: str, *args: str, extra: dict[str, str] | None = None) -> Any:
        done = cli(data, *args, env={**LOOPBACK, "TOOLSPOKE_LOG_LEVEL": "DEBUG", **(extra or {})}, timeout=90)
        seen.append((f"cli {where} -> rc {done.returncode}", done.stdout + done.stderr))
        return done

    with (
        CanaryHttpUpstream("client-1", client_secret, refresh) as http_up,
        CanaryMcpUpstream() as mcp_up,
        running_appliance(data, env=env) as app,
        httpx.Client(
            base_url=app.base_url, headers={"Authorization": f"Bearer {app.key}"}, timeout=60
        ) as api,
    ):
        call = caller(app, api, keep)
        schemes: dict[str, dict[str, Any]] = {
            "c-bearer": {"scheme": "bearer", "token": bearer},
            "c-header": {"scheme": "header", "name": "X-Api-Key", "value": header},
            "c-query": {"scheme": "query", "name": "api_key", "value": query},
            "c-cookie": {"scheme": "cookie", "name": "session", "value": cookie},
            "c-basic": {"scheme": "basic", "username": user, "password": password},
            "c-oauth": {
                "scheme": "oauth2",
                "token_url": http_up.base_url + "/oauth/token",
                "client_id": "client-1",
                "client_secret": client_secret,
                "refresh_token": refresh,
            },
        }
        for slug, body in schemes.items():
            keep(
                f"import {slug}",
                api.post("/api/v1/toolkits/openapi", json={"slug": slug, "spec": http_up.spec()}),
            )
            keep(f"set {slug}", api.put(f"/api/v1/toolkits/{slug}/credentials", json=body))
            keep(f"show {slug}", api.get(f"/api/v1/toolkits/{slug}/credentials"))
            for tool in ("private",) if slug == "c-oauth" else ("echo", "fail"):
                call(f"{slug}__{tool}", {} if tool == "private" else {"q": "hi"})
        # One toolkit's answer carrying every other toolkit's credential (a shared upstream's log).
        call("c-header__seen", {})
        run_cli("call c-basic__echo", "call", "c-basic__echo", "--json")
        run_cli("call c-bearer__fail", "call", "c-bearer__fail", "--json")
        # OAuth: the access token is revoked and the next refresh refused, quoting its form.
        http_up.access_tokens.clear()
        http_up.refuse_grants = True
        call("c-oauth__private", {})
        run_cli("call c-oauth__private", "call", "c-oauth__private", "--json")

        # Remote MCP: imported with a bearer (admin API) and an API-key header, used, then the
        # upstream starts quoting what it receives in its errors (JSON-RPC, then HTTP 401).
        bearer_auth = {"scheme": "bearer", "token": mcp_bearer}
        key_auth = {"scheme": "header", "name": "X-Key", "value": mcp_key}
        for slug, auth in (("m-bearer", bearer_auth), ("m-key", key_auth)):
            doc = {"slug": slug, "url": mcp_up.url, "auth": auth}
            keep(f"dry-run {slug}", api.post("/api/v1/toolkits/mcp", json={**doc, "dry_run": True}))
            keep(f"import {slug}", api.post("/api/v1/toolkits/mcp", json=doc))
            call(f"{slug}__echo", {})
            call(f"{slug}__fail", {})
        token_env = {"MCP_TOKEN": mcp_cli}
        run_cli("import m-cli", "import", "mcp", mcp_up.url, "--slug", "m-cli", "--bearer-env", "MCP_TOKEN",
                "--json", extra=token_env)  # fmt: skip
        call("m-cli__echo", {})
        for mode in ("rpc", "http"):
            mcp_up.failing = mode
            for slug in ("m-bearer", "m-key", "m-cli"):
                keep(f"sync {slug} ({mode})", api.post(f"/api/v1/toolkits/{slug}/sync"))
                call(f"{slug}__echo", {})
                keep(f"probe {slug} ({mode})", api.post(f"/api/v1/toolkits/{slug}/probe"))
            for slug, auth in ((f"m-new-{mode}", bearer_auth), (f"m-newkey-{mode}", key_auth)):
                doc = {"slug": slug, "url": mcp_up.url, "auth": auth}
                keep(f"dry-run {slug}", api.post("/api/v1/toolkits/mcp", json={**doc, "dry_run": True}))
                keep(f"import {slug}", api.post("/api/v1/toolkits/mcp", json=doc))
            run_cli(f"sync m-cli ({mode})", "sync", "m-cli")  # each CLI run costs a process start
            run_cli(f"dry-run m-cli2 ({mode})", "import", "mcp", mcp_up.url, "--slug", f"m-cli-{mode}",
                    "--bearer-env", "MCP_TOKEN", "--dry-run", "--json", extra=token_env)  # fmt: skip
        mcp_up.failing = ""

        # A stdio server whose CANARY_TOKEN comes from the vault; it prints it to stderr too.
        stdio_env = {"MY_CANARY": env_secret, "TOOLSPOKE_STDIO_ALLOWED_COMMANDS": Path(sys.executable).name}
        run_cli("import s-env", "import", "mcp", "--slug", "s-env", "--secret-env", "CANARY_TOKEN=MY_CANARY",
                "--json", "--", sys.executable, str(STDIO_SERVER), extra=stdio_env)  # fmt: skip
        for tool in ("echo_env", "fail_env", "broken_env"):
            call(f"s-env__{tool}", {})
        run_cli("call s-env__fail_env", "call", "s-env__fail_env", "--json", extra=stdio_env)
        keep("sync s-env", api.post("/api/v1/toolkits/s-env/sync"))

        # What an owner and an operator look at afterwards.
        for path in ("/api/v1/toolkits", "/api/v1/health/toolkits", "/api/v1/users/1/calls", "/api/v1/me"):
            keep(path, api.get(path))
        for slug in ("m-bearer", "s-env"):
            keep(f"pending {slug}", api.get(f"/api/v1/toolkits/{slug}/pending"))
        run_cli("toolkits", "toolkits", "--json")
        run_cli("credentials show", "credentials", "show", "c-oauth", "--json")
        keep("metrics", api.get("/metrics"))
        backup = api.get("/api/v1/backup")
        assert backup.status_code == 200, backup.text
        sweep.search("backup download", backup.content)
        run_cli("backup", "backup", str(tmp_path / "cli-backup.db"))
        for name, blob in database_files(data).items():
            sweep.search(f"{name} (serving)", blob)
        for token in http_up.access_tokens:
            sweep.add(f"ACCESS{len(sweep.canaries)}", token)
        # The upstreams really were sent the credentials (else the sweep proves nothing).
        sent = json.dumps([r.headers for r in http_up.requests] + [r.query for r in http_up.requests])
        assert bearer in sent and header in sent and query.split("+")[0] in sent and cookie in sent
    sweep.search("serve log", "".join(app.output))
    for where, text in seen:
        sweep.search(where, text)
    if (tmp_path / "cli-backup.db").exists():
        sweep.search("cli backup", (tmp_path / "cli-backup.db").read_bytes())
    for name, blob in database_files(data).items():
        sweep.search(f"{name} (stopped)", blob)
    searched = sum(sweep.looked.values())
    print(f"\ncanary sweep: {len(sweep.canaries)} canaries, {len(sweep.looked)} places, {searched} bytes")
    assert not sweep.found, f"{len(sweep.found)} leaks:\n" + "\n".join(sweep.found)


def caller(app: Appliance, api: httpx.Client, keep: Callable[[str, httpx.Response], httpx.Response]) -> Any:
    """A stateless tools/call on /mcp as the admin; its answer is kept for the sweep."""

    def call(tool: str, arguments: dict[str, Any]) -> httpx.Response:
        headers, body = modern_tools_call(app.key, tool, arguments)
        return keep(f"tools/call {tool}", api.post("/mcp", headers=headers, json=body))

    return call
