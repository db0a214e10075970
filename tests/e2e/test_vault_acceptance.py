"""Issue 5 acceptance: the canary sweep, rotation under load, the master-key start-up rule,
and the egress guard at call time, on a real ``toolspoke serve`` with real upstreams.

- VAULT-01 / I-4: canary credentials of every style go through import → call → rotate;
  then every response, CLI output, log line and the database, WAL and SHM files are
  searched for each canary in plain, URL-encoded, base64 and hex form: nothing.
- VAULT-06: ``vault rotate`` re-seals thousands of secrets while calls keep succeeding;
  the old version is then retired.
- Start-up with a wrong, malformed or missing master key: exit 2, a clear message, the data
  untouched and no key file created.
- SSRF-01 / I-1: a stored row edited to point at an internal address is refused at call
  time (``ssrf_blocked``) and the listener there sees no connection.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import sqlean

from tests.support.clients import connect
from tests.support.echo_upstream import EchoUpstream, echo_spec
from tests.support.peers import EVERYTHING
from tests.support.servers import REPO, Appliance, cli, running_appliance
from tests.support.vault_seed import seed_offline

pytestmark = pytest.mark.e2e


def canary(tag: str) -> str:
    return f"CANARY{tag}-{secrets.token_hex(16)}"


def forms(value: str) -> list[bytes]:
    raw = value.encode()
    return [raw, quote(value, safe="").encode(), base64.b64encode(raw).rstrip(b"="), raw.hex().encode()]


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


def admin(app: Appliance) -> httpx.Client:
    return httpx.Client(base_url=app.base_url, headers={"Authorization": f"Bearer {app.key}"}, timeout=60)


def import_echo(
    api: httpx.Client, echo: EchoUpstream, slug: str, base_url: str | None = None
) -> httpx.Response:
    return api.post(
        "/api/v1/toolkits/openapi", json={"slug": slug, "spec": echo_spec(base_url or echo.base_url)}
    )


@contextmanager
def served(data: Path, **env: str) -> Iterator[tuple[EchoUpstream, Appliance, httpx.Client]]:
    """An echo upstream and an appliance (demo off) with an admin client."""
    with (
        EchoUpstream() as echo,
        # the response cap is under test here, not results kept aside (tests/e2e/test_artifacts.py)
        running_appliance(
            data, env={"TOOLSPOKE_DEMO": "0", "TOOLSPOKE_ARTIFACT_THRESHOLD_BYTES": "0", **env}
        ) as app,
        admin(app) as api,
    ):
        yield echo, app, api


def text_of(result: Any) -> str:
    parts = "".join(getattr(p, "text", "") for p in result.content)
    return parts + json.dumps(result.structured_content or {}) + json.dumps(result.meta or {})


def secret_rows(db: Path) -> list[tuple[Any, ...]]:
    conn = sqlean.connect(str(db))
    try:
        rows = conn.execute("SELECT toolkit_id, scheme, key_version, blob FROM secrets ORDER BY toolkit_id")
        keys = conn.execute("SELECT version, wrapped FROM vault_keys ORDER BY version")
        return [tuple(r) for r in rows.fetchall()] + [tuple(r) for r in keys.fetchall()]
    finally:
        conn.close()


def test_canary_credentials_never_leave_through_any_response_log_or_database_page(tmp_path: Path) -> None:
    """VAULT-01 / I-4: canaries of every style are absent from responses, logs, DB, WAL and SHM."""
    header_key, query_key, password, stdio_token = (canary(t) for t in ("HDR", "QRY", "PWD", "ENV"))
    user = "bot-" + secrets.token_hex(3)
    seen: list[str] = []  # everything a client, an owner or an operator got to read
    env = {"TOOLSPOKE_DEMO": "0", "TOOLSPOKE_LOG_LEVEL": "DEBUG"}
    data = tmp_path / "data"
    with EchoUpstream() as echo, running_appliance(data, env=env) as app, admin(app) as api:
        creds = {
            "hdr": {"scheme": "header", "value": header_key},
            "qry": {"scheme": "query", "value": query_key},
            "pwd": {"scheme": "basic", "username": user, "password": password},
        }
        for slug, body in creds.items():
            r = import_echo(api, echo, slug)
            assert r.status_code == 201, r.text
            r = api.put(f"/api/v1/toolkits/{slug}/credentials", json=body)
            assert r.status_code == 200, r.text
            seen += [r.text, api.get(f"/api/v1/toolkits/{slug}/credentials").text]
        if EVERYTHING.exists():
            done = cli(
                data,
                "import", "mcp", "--slug", "every", "--secret-env", "API_TOKEN=CANARY_SOURCE",
                "--", "node", str(EVERYTHING.resolve()), "stdio",
                env={"CANARY_SOURCE": stdio_token, **env},
                timeout=120,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            seen += [done.stdout, done.stderr]

        async def calls() -> None:
            async with connect(app) as client:
                for slug in creds:
                    echoed = await client.call_tool(f"{slug}__echo", {"q": "x"})
                    assert echoed.is_error is False and "[redacted]" in text_of(echoed)
                    refused = await client.call_tool(f"{slug}__private", {})  # a 401 quoting our header
                    assert refused.is_error is True
                    too_big = await client.call_tool(f"{slug}__big", {"n": 300_000})
                    assert (
                        too_big.is_error is True and too_big.meta["toolspoke/reason"] == "upstream_too_large"
                    )
                    seen.extend(text_of(r) for r in (echoed, refused, too_big))
                if EVERYTHING.exists():
                    env_dump = await client.call_tool("every__get-env", {})
                    assert env_dump.is_error is False and "[redacted]" in text_of(env_dump)
                    seen.append(text_of(env_dump))
                found = await client.call_tool("search_tools", {"query": "echo the request"})
                kits = await client.call_tool("list_toolkits", {})
                seen.extend(text_of(r) for r in (found, kits))

        run(calls())
        assert any(r.headers.get("x-api-key") == header_key for r in echo.requests)  # it did go out
        seen += [api.get("/api/v1/toolkits").text, api.get("/health").text]
        rotated = cli(data, "vault", "rotate", env=env)
        assert rotated.returncode == 0, rotated.stderr
        run(calls())  # after the rotation, with the new key version
        retired = cli(data, "vault", "retire", "1", env=env)
        assert retired.returncode == 0, retired.stderr
        run(calls())
        shown = cli(data, "credentials", "show", "pwd", "--json", env=env)
        seen += [rotated.stdout, rotated.stderr, retired.stdout, shown.stdout, shown.stderr]
        log = "".join(app.output)
    haystacks = [s.encode() for s in [*seen, log]]
    files = sorted(data.glob("toolspoke.db*"))
    assert files, "the database files exist"
    haystacks += [f.read_bytes() for f in files]
    pair = f"{user}:{password}"
    for secret in (header_key, query_key, password, pair, stdio_token):
        for form in forms(secret):
            for hay in haystacks:
                if form in hay:
                    at = hay.index(form)
                    context = hay[max(0, at - 200) : at + 60]
                    raise AssertionError(f"a form of a canary ({form[:10]!r}…) leaked: {context!r}")
    assert (data / "master.key").stat().st_mode & 0o777 == 0o600
    for f in files:
        assert f.stat().st_mode & 0o077 == 0, f"{f.name} is readable by others"


def test_rotation_reseals_every_secret_while_calls_keep_succeeding_and_the_old_version_retires(
    tmp_path: Path,
) -> None:
    """VAULT-06: rotation under calls; every row opens; the old version retires."""
    data = tmp_path / "data"
    data.mkdir()
    token = canary("ROT")
    with EchoUpstream() as echo:
        # The served toolkit comes first, so its row is re-sealed in the first batch and the
        # calls that follow must open a key version the server did not have at start.
        with running_appliance(data, env={"TOOLSPOKE_DEMO": "0"}) as app, admin(app) as api:
            r = import_echo(api, echo, "rot")
            assert r.status_code == 201, r.text
            assert (
                api.put(
                    "/api/v1/toolkits/rot/credentials", json={"scheme": "bearer", "token": token}
                ).status_code
                == 200
            )
        seed_offline(data, 3000)
        with running_appliance(data, env={"TOOLSPOKE_DEMO": "0"}) as app, admin(app) as api:
            outcomes: list[tuple[float, float, bool]] = []
            stop = threading.Event()

            def caller() -> None:
                async def loop() -> None:
                    async with connect(app) as client:
                        while not stop.is_set():
                            started = time.monotonic()
                            result = await client.call_tool("rot__echo", {})
                            ok = result.is_error is False and "Bearer [redacted]" in text_of(result)
                            outcomes.append((started, time.monotonic(), ok))

                run(loop())

            thread = threading.Thread(target=caller)
            thread.start()
            try:
                began = time.monotonic()
                rotated = subprocess.run(
                    [sys.executable, "-m", "appliance", "vault", "rotate", "--batch", "50", "--json"],
                    capture_output=True, text=True, timeout=300, cwd=REPO, check=False,
                    env={**os.environ, "TOOLSPOKE_DATA_DIR": str(data)},
                )  # fmt: skip
                ended = time.monotonic()
            finally:
                stop.set()
                thread.join(timeout=120)
            assert rotated.returncode == 0, rotated.stderr
            assert json.loads(rotated.stdout) == {"version": 2, "resealed": 3001}
            during = [o for o in outcomes if o[0] >= began and o[1] <= ended]
            assert during, "no call ran during the rotation (it was too fast to observe)"
            assert all(ok for _, _, ok in outcomes), "a call failed during or after the rotation"
            status = json.loads(cli(data, "vault", "status", "--json").stdout)["versions"]
            assert [(v["version"], v["secrets"]) for v in status] == [(1, 0), (2, 3001)]
            assert cli(data, "vault", "retire", "1").returncode == 0
            after = run(_one_call(app))
            assert after.is_error is False
            sent = [q for q in echo.requests if q.path == "/api/echo"]
            assert sent and all(q.headers["authorization"] == f"Bearer {token}" for q in sent)
    refused = cli(data, "vault", "retire", "2")
    assert refused.returncode == 1 and "primary" in refused.stderr


async def _one_call(app: Appliance) -> Any:
    async with connect(app) as client:
        return await client.call_tool("rot__echo", {})


@pytest.mark.timeout(120)  # ten process starts, each refused at start-up
def test_a_wrong_malformed_or_missing_master_key_stops_start_up_with_exit_2_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """VAULT-06 / I-7: a wrong, malformed or missing master key stops start-up and changes nothing."""
    data = tmp_path / "data"
    token = canary("KEY")
    with EchoUpstream() as echo:
        with running_appliance(data, env={"TOOLSPOKE_DEMO": "0"}) as app, admin(app) as api:
            import_echo(api, echo, "k")
            assert (
                api.put(
                    "/api/v1/toolkits/k/credentials", json={"scheme": "bearer", "token": token}
                ).status_code
                == 200
            )
        db = data / "toolspoke.db"
        before = secret_rows(db)
        key_file = data / "master.key"
        good = key_file.read_text()
        cases = {
            "wrong": (secrets.token_hex(32) + "\n", "wrong key"),
            "malformed": ("not-a-key\n", "malformed"),
            "missing": (None, "no master key"),
        }
        for name, (content, message) in cases.items():
            if content is None:
                key_file.unlink()
            else:
                key_file.write_text(content)
            for argv, extra in (
                (["serve", "--port", "0"], {}),
                (["credentials", "show", "k"], {}),
                (["stdio"], {"TOOLSPOKE_API_KEY": "tsk_x"}),
            ):
                done = cli(data, *argv, env={"ALLOWED_TOOL_CIDRS": "127.0.0.1/32", **extra}, timeout=60)
                assert done.returncode == 2, (name, argv, done.stdout, done.stderr)
                assert message in done.stderr, (name, argv, done.stderr)
                assert "Traceback" not in done.stderr + done.stdout
            assert secret_rows(db) == before, f"{name}: the vault changed"
            if content is None:
                assert not key_file.exists(), "a missing key was silently recreated"
        # The same key from the environment, or the file restored, opens the vault again.
        by_env = cli(data, "credentials", "show", "k", "--json", env={"TOOLSPOKE_MASTER_KEY": good.strip()})
        assert by_env.returncode == 0 and json.loads(by_env.stdout)["set"] is True
        key_file.write_text(good)
        key_file.chmod(0o600)
        with running_appliance(data, env={"TOOLSPOKE_DEMO": "0"}) as app:
            result = run(_call(app, "k__echo"))
            assert result.is_error is False
        assert echo.requests[-1].headers["authorization"] == f"Bearer {token}"


async def _call(app: Appliance, name: str, arguments: dict[str, Any] | None = None) -> Any:
    async with connect(app) as client:
        return await client.call_tool(name, arguments or {})


@pytest.fixture
def listener() -> Iterator[tuple[str, int, list[int]]]:
    """A TCP listener on 127.0.0.2 (loopback, but not opened) that counts accepted connections."""
    sock = socket.socket()
    sock.bind(("127.0.0.2", 0))
    sock.listen(8)
    sock.settimeout(0.1)
    accepted: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield "127.0.0.2", sock.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(timeout=5)
        sock.close()


def test_a_stored_target_edited_to_an_internal_address_is_refused_at_call_time_without_a_connection(
    tmp_path: Path, listener: tuple[str, int, list[int]]
) -> None:
    """SSRF-01 / I-1 / I-7: refused at registration; an edited row is ssrf_blocked, unconnected."""
    host, port, accepted = listener
    with served(tmp_path / "data") as (echo, app, api):
        internal = f"http://{host}:{port}"
        # Registration refuses it, naming the field, the address and the rule.
        r = import_echo(api, echo, "in", internal)
        assert r.status_code == 422 and r.json()["error"]["field"] == "base_url"
        assert "127.0.0.2" in r.json()["error"]["message"] and "loopback" in r.json()["error"]["message"]
        r = import_echo(api, echo, "in")
        assert r.status_code == 201
        conn = sqlean.connect(str(app.data_dir / "toolspoke.db"))
        try:
            conn.execute("UPDATE toolkits SET base_url = ? WHERE slug = 'in'", (internal,))
            conn.commit()
        finally:
            conn.close()
        for target in ("in__echo", "in__private"):
            result = run(_call(app, target))
            assert result.is_error is True
            assert result.meta["toolspoke/reason"] == "ssrf_blocked"
            assert "127.0.0.2" in text_of(result) and "Traceback" not in text_of(result)
        assert accepted == [], "the guard let a connection through to a refused address"


def test_an_oversized_answer_names_size_and_cap_and_the_owner_may_raise_the_cap_per_toolkit(
    tmp_path: Path,
) -> None:
    """UP-04: an OpenAPI answer over the cap is upstream_too_large naming the cap; per-toolkit cap."""
    with served(tmp_path / "data") as (echo, app, api):
        for slug in ("small", "large"):
            r = import_echo(api, echo, slug)
            assert r.status_code == 201
        too_big = run(_call(app, "large__big", {"n": 400_000}))
        assert too_big.is_error is True
        assert too_big.meta["toolspoke/reason"] == "upstream_too_large"
        assert too_big.meta["toolspoke/max_bytes"] == 262144 and "262144" in text_of(too_big)
        raised = api.put("/api/v1/toolkits/large/limits", json={"max_response_bytes": 1 << 20})
        assert raised.status_code == 200 and raised.json()["effective"] == 1 << 20
        fits = run(_call(app, "large__big", {"n": 400_000}))
        assert fits.is_error is False and len(fits.content[0].text) == 400_002
        still = run(_call(app, "small__big", {"n": 400_000}))  # another toolkit keeps the setting
        assert still.is_error is True
        bad = api.put("/api/v1/toolkits/large/limits", json={"max_response_bytes": -1})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "max_response_bytes"
        back = cli(app.data_dir, "toolkits", "cap", "large", "default")
        assert back.returncode == 0 and "262144" in back.stdout
        assert run(_call(app, "large__big", {"n": 400_000})).is_error is True


def test_a_tampered_credential_fails_closed_as_credential_unavailable_and_nothing_is_sent(
    tmp_path: Path,
) -> None:
    """VAULT-03 / I-1 / I-7: a tampered credential is credential_unavailable; nothing is sent."""
    with served(tmp_path / "data") as (echo, app, api):
        for slug in ("a", "b"):
            assert import_echo(api, echo, slug).status_code == 201
            body = {"scheme": "bearer", "token": canary(slug.upper())}
            assert api.put(f"/api/v1/toolkits/{slug}/credentials", json=body).status_code == 200
        conn = sqlean.connect(str(app.data_dir / "toolspoke.db"))
        try:
            rows = dict(conn.execute("SELECT toolkit_id, blob FROM secrets").fetchall())
            ids = sorted(rows)
            flipped = bytearray(rows[ids[0]])
            flipped[-1] ^= 1
            # Toolkit a's blob with one bit flipped; toolkit b's row given a's intact blob.
            conn.execute("UPDATE secrets SET blob = ? WHERE toolkit_id = ?", (bytes(flipped), ids[0]))
            conn.execute("UPDATE secrets SET blob = ? WHERE toolkit_id = ?", (rows[ids[0]], ids[1]))
            conn.commit()
        finally:
            conn.close()
        before = len(echo.requests)
        for name in ("a__echo", "b__echo"):
            result = run(_call(app, name))
            assert result.is_error is True
            assert result.meta["toolspoke/reason"] == "credential_unavailable"
            assert "cannot be decrypted" in text_of(result) and "Traceback" not in text_of(result)
        assert len(echo.requests) == before, "a call went out without its credential"
        assert api.get("/health").status_code == 200  # the process stays up
        probed = api.post("/api/v1/toolkits/a/probe")
        assert probed.status_code == 200, probed.text
        assert probed.json()["health"] == "broken"
        assert "cannot be decrypted" in probed.json()["reason"]


def test_rekey_replaces_the_master_key_while_serving_and_calls_keep_working(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = canary("REKEY")
    env = {"TOOLSPOKE_DEMO": "0"}
    with EchoUpstream() as echo:
        with running_appliance(data, env=env) as app, admin(app) as api:
            assert import_echo(api, echo, "rk").status_code == 201
            body = {"scheme": "bearer", "token": token}
            assert api.put("/api/v1/toolkits/rk/credentials", json=body).status_code == 200
            old = (data / "master.key").read_text()
            assert run(_call(app, "rk__echo")).is_error is False
            rekeyed = cli(data, "vault", "rekey")
            assert rekeyed.returncode == 0, rekeyed.stderr
            assert (data / "master.key").read_text() != old
            assert old.strip() not in rekeyed.stdout + rekeyed.stderr
            assert run(_call(app, "rk__echo")).is_error is False
            # A key version made after the rekey: the server needs the new master key for it.
            assert cli(data, "vault", "rotate").returncode == 0
            assert run(_call(app, "rk__echo")).is_error is False
            assert echo.requests[-1].headers["authorization"] == f"Bearer {token}"
        with running_appliance(data, env=env) as app:
            assert run(_call(app, "rk__echo")).is_error is False
    (data / "master.key").write_text(old)
    stale = cli(data, "credentials", "show", "rk")
    assert stale.returncode == 2 and "wrong key" in stale.stderr
