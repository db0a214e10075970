"""Every egress path goes through the guard (RELIABILITY SSRF-09), and credentials on the wire.

Real I/O against the recording server on loopback (``tests/support/recording_upstream.py``):
when the guard refuses, the server must have seen no connection at all (invariant I-1).
"""

from __future__ import annotations

import base64
import logging
import os
import socket
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from appliance import config
from appliance.catalogue.openapi import convert_openapi
from appliance.children.processes import StdioPolicy, StdioProcess, StdioSpec
from appliance.egress.auth import Authorizer, UpstreamAuth
from appliance.egress.guard import EgressPolicy
from appliance.egress.oauth import OAuthGrant, TokenCache
from appliance.egress.openapi_call import call_operation
from appliance.egress.reach import tcp_reachable
from appliance.egress.transport import Egress
from appliance.errors import ConfigError, UpstreamError
from appliance.secret import REDACTED, Redactor, Secret, secret_forms
from tests.support.echo_upstream import EchoUpstream
from tests.support.loops import LOOPS, LoopFactory, run_on
from tests.support.recording_upstream import RecordingServer, serving
from tests.unit.egress.test_guard import refusal, run, upstream

LOOPBACK = ("127.0.0.1/32",)
__all__ = ["upstream"]  # the recording-server fixture, shared with test_egress_guard


# -- the localhost rule ---------------------------------------------------------------------


def test_localhost_is_judged_as_127_0_0_1_so_the_advice_in_its_refusal_works(
    upstream: RecordingServer,
) -> None:
    """SSRF-02: localhost is 127.0.0.1, refused by default and opened only via ALLOWED_TOOL_CIDRS."""
    url = f"http://localhost:{upstream.port}/echo"
    closed = EgressPolicy()
    with pytest.raises(UpstreamError) as at_registration:
        closed.check_url(url, field="base_url")
    error = at_registration.value
    assert error.field == "base_url" and error.data == {"address": "127.0.0.1", "rule": "loopback"}
    assert "localhost resolves to 127.0.0.1" in error.public_message
    assert "ALLOWED_TOOL_CIDRS" in error.public_message
    assert refusal(closed.resolve("localhost", 80)).data["rule"] == "loopback"
    assert upstream.connections == 0

    async def opened() -> Any:
        async with Egress(EgressPolicy(LOOPBACK)) as egress:
            return await egress.send("GET", url)

    answer = run(opened())
    assert answer.status == 200
    assert upstream.requests[-1]["headers"]["host"] == f"localhost:{upstream.port}"
    # ::1 is not what localhost means here: opening only IPv6 loopback does not open it.
    assert refusal(EgressPolicy(("::1/128",)).resolve("localhost", 80)).reason == "ssrf_blocked"


# -- OAuth token endpoint, remote $ref, server variables -----------------------------------------


def _grant(url: str) -> OAuthGrant:
    return OAuthGrant(token_url=url, client_id=Secret("client"), refresh_token=Secret("refresh-123456"))


def test_an_oauth_token_url_on_a_refused_address_is_ssrf_blocked_and_nothing_is_sent(
    upstream: RecordingServer,
) -> None:
    """SSRF-09 (d) / I-1: an OAuth token URL goes through the same guard; nothing is sent."""

    async def attempt() -> Any:
        async with Egress(EgressPolicy()) as egress:  # loopback not opened
            return await TokenCache().access_token(egress, "k", _grant(f"{upstream.base}/token"))

    assert refusal(attempt()).reason == "ssrf_blocked"
    assert upstream.connections == 0


def test_a_token_endpoint_that_fails_is_credential_unavailable_and_its_body_is_not_quoted(
    upstream: RecordingServer,
) -> None:
    async def attempt() -> Any:
        async with Egress(EgressPolicy(LOOPBACK)) as egress:
            return await TokenCache().access_token(egress, "k", _grant(f"{upstream.base}/status/401"))

    error = refusal(attempt())
    assert error.reason == "credential_unavailable" and error.data == {"status": 401}
    # Only a well-formed OAuth error code is quoted from the body, never the rest of it.
    assert error.public_message.endswith("HTTP 401 (nope)")
    assert "refresh-123456" not in error.public_message
    sent = upstream.requests[-1]
    assert sent["method"] == "POST"
    # A public client (no secret) identifies itself in the form (RFC 6749 §2.3.1).
    assert sent["body"] == "grant_type=refresh_token&refresh_token=refresh-123456&client_id=client"


def test_a_remote_ref_in_a_spec_is_never_fetched(upstream: RecordingServer) -> None:
    """SSRF-09 (a) / I-1: a remote $ref is never fetched."""
    spec = {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "servers": [{"url": "https://api.example.com"}],
        "paths": {
            "/a": {
                "post": {
                    "operationId": "remote",
                    "requestBody": {
                        "content": {"application/json": {"schema": {"$ref": f"{upstream.base}/s.json"}}}
                    },
                    "responses": {"200": {"description": "ok"}},
                }
            },
            "/b": {"get": {"operationId": "local", "responses": {"200": {"description": "ok"}}}},
        },
    }
    draft = convert_openapi(spec, "refs")
    assert [t.upstream_name for t in draft.tools] == ["local"]
    assert "points outside this document" in draft.skipped[0].reason
    assert upstream.connections == 0


def test_server_variables_are_fixed_at_import_and_never_an_agent_input() -> None:
    """SSRF-08: server variables are fixed at import; agents cannot choose scheme, host or port."""
    spec = {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "servers": [
            {
                "url": "https://{region}.api.example.com:{port}/v1",
                "variables": {
                    "region": {"default": "eu", "enum": ["eu", "us"]},
                    "port": {"default": "443"},
                },
            }
        ],
        "paths": {"/x": {"get": {"operationId": "x", "responses": {"200": {"description": "ok"}}}}},
    }
    draft = convert_openapi(spec, "vars")
    assert draft.base_url == "https://eu.api.example.com:443/v1"
    schema = draft.tools[0].input_schema
    assert not {"region", "port", "host", "url", "baseUrl"} & set(schema.get("properties", {}))
    owner = convert_openapi(spec, "vars", base_url="https://us.api.example.com/v1")
    assert owner.base_url == "https://us.api.example.com/v1"


# -- credentials on the wire ------------------------------------------------------------------


BINDING = {
    "method": "GET",
    "path": "/echo",
    "params": [
        {"arg": "api_key", "name": "api_key", "location": "query"},
        {"arg": "session", "name": "session", "location": "cookie"},
    ],
}


def _call(upstream: RecordingServer, auth: UpstreamAuth, arguments: dict[str, Any]) -> Any:
    async def main() -> Any:
        async with Egress(EgressPolicy(LOOPBACK)) as egress:
            authorizer = Authorizer(auth, TokenCache(), "t")
            return await call_operation(
                egress,
                base_url=upstream.base,
                binding=BINDING,
                arguments=arguments,
                timeout_s=10,
                max_bytes=1 << 20,
                authorizer=authorizer,
            )

    return run(main())


def test_the_owner_query_and_cookie_credential_replace_an_agent_value_of_the_same_name(
    upstream: RecordingServer,
) -> None:
    """VAULT-01: the agent cannot override the owner's credential in query or cookie."""
    _call(
        upstream, UpstreamAuth("query", name="api_key", value=Secret("owner-key-123")), {"api_key": "agent"}
    )
    assert upstream.requests[-1]["path"] == "/echo?api_key=owner-key-123"
    _call(
        upstream, UpstreamAuth("cookie", name="session", value=Secret("owner-cookie-1")), {"session": "agent"}
    )
    assert upstream.requests[-1]["headers"]["cookie"] == "session=owner-cookie-1"


# -- redaction ----------------------------------------------------------------------------------


def test_every_encoded_form_of_a_secret_is_redacted_and_short_or_unrelated_text_is_kept() -> None:
    """VAULT-01 / I-4: plain, URL-encoded, base64 and hex forms of a secret are redacted."""
    secret = "s3cr3t/v@lue+="
    redactor = Redactor([secret])
    for form in secret_forms(secret):
        assert redactor.text(f"before {form} after") == f"before {REDACTED} after"
    doc = {"headers": {"x": f"Bearer {secret}"}, secret: [1, f"{secret}"], "n": 5}
    assert redactor.value(doc) == {"headers": {"x": f"Bearer {REDACTED}"}, REDACTED: [1, REDACTED], "n": 5}
    assert redactor.text("nothing to hide here") == "nothing to hide here"
    assert not Redactor(["ab"])  # too short to search for without mangling every answer
    basic = UpstreamAuth("basic", username=Secret("bot"), password=Secret("pw-123456"))
    pair = base64.b64encode(b"bot:pw-123456").decode()
    assert (
        Redactor(basic.secrets()).text(f"Authorization: Basic {pair}") == f"Authorization: Basic {REDACTED}"
    )


@pytest.mark.parametrize("loop", LOOPS)
def test_a_stdio_child_gets_its_vault_variable_and_its_stderr_echo_is_redacted_in_log_and_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, loop: LoopFactory
) -> None:
    """VAULT-08 / I-4: a stdio child gets its own vault variable; its stderr echo is redacted."""
    token = "CANARY-stdio-" + os.urandom(8).hex()
    body = """
    import os, sys
    print("token is " + os.environ["API_TOKEN"], file=sys.stderr, flush=True)
    sys.exit(3)
    """
    path = tmp_path / "child.py"
    path.write_text(textwrap.dedent(body))
    policy = StdioPolicy(workdir_root=tmp_path / "stdio", base_env={"PATH": os.environ["PATH"]})
    spec = StdioSpec(command=sys.executable, args=(str(path),), secret_env={"API_TOKEN": Secret(token)})
    assert token not in repr(spec)

    async def main() -> UpstreamError:
        proc = StdioProcess("secret-env", spec, policy)
        await proc.start()
        try:
            with pytest.raises(UpstreamError) as info:
                await proc.read_line()
            return info.value
        finally:
            await proc.aclose()

    with caplog.at_level(logging.INFO):
        error = run_on(loop, main())
    assert error.data["stderr"] == [f"token is {REDACTED}"]  # the child did read the variable
    assert token not in caplog.text and "token is [redacted]" in caplog.text


# -- the process environment (SSRF-10) -------------------------------------------------------------


def test_proxy_variables_in_the_environment_are_ignored_so_the_pinned_connection_stays_direct(
    upstream: RecordingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SSRF-10: HTTP(S)_PROXY in the environment cannot route around the pinned transport."""
    with serving() as proxy:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
            monkeypatch.setenv(name, proxy.base)
        monkeypatch.setenv("NO_PROXY", "")

        async def main() -> Any:
            async with Egress(EgressPolicy(LOOPBACK)) as egress:
                return await egress.send("GET", f"{upstream.base}/echo")

        assert run(main()).status == 200
        assert proxy.connections == 0
        assert upstream.requests[-1]["path"] == "/echo"  # origin-form: not sent as to a proxy


@pytest.mark.parametrize("value", ["10.0.0.0/33", "0.0.0.0/0", "::/0", "*", "10.0.0.0/8,bogus"])
def test_a_malformed_or_everything_opening_cidr_list_refuses_to_start_naming_the_setting(
    tmp_path: Path, value: str
) -> None:
    """SSRF-10: a malformed, host-bits or everything-opening CIDR list refuses to start naming it."""
    with pytest.raises(ConfigError) as refused:
        config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path), "ALLOWED_TOOL_CIDRS": value})
    assert refused.value.field == "allowed_tool_cidrs"
    spaced = config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path), "ALLOWED_TOOL_CIDRS": " 10.0.0.0/8 ,"})
    assert spaced.allowed_tool_cidrs == ("10.0.0.0/8",)


def test_a_health_probe_to_a_name_that_now_resolves_internally_is_refused_without_connecting() -> None:
    """SSRF-09 (c) / UP-11 / I-1: a health probe obeys the guard; nothing connects."""

    async def fixed(host: str, port: int) -> list[str]:
        return ["10.0.0.7"] if host == "api.test" else ["127.0.0.1"]

    async def probe(url: str) -> None:
        async with Egress(EgressPolicy(LOOPBACK, resolver=fixed)) as egress:
            await tcp_reachable(egress, url, timeout_s=5)

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        error = refusal(probe(f"http://api.test:{port}/"))
        assert error.reason == "ssrf_blocked" and error.data == {"address": "10.0.0.7", "rule": "private"}
        with pytest.raises(BlockingIOError):  # nothing is waiting in the backlog: no connect
            listener.accept()
        # The same probe to an allowed answer connects (the handshake is done when it returns).
        run(probe(f"http://ok.test:{port}/"))
        accepted, _ = listener.accept()
        accepted.close()


def test_an_oauth_call_answered_401_is_refreshed_and_sent_once_more_never_in_a_loop(
    upstream: RecordingServer,
) -> None:
    with EchoUpstream(client_secret="cs-123456", refresh_token="rt-0-123456") as auth_server:
        grant = OAuthGrant(
            token_url=auth_server.base_url + "/oauth/token",
            client_id=Secret(auth_server.client_id),
            client_secret=Secret("cs-123456"),
            refresh_token=Secret("rt-0-123456"),
        )
        rotated: list[Secret] = []

        async def keep(new: Secret) -> None:
            rotated.append(new)

        async def main() -> Any:
            async with Egress(EgressPolicy(LOOPBACK)) as egress:
                authorizer = Authorizer(
                    UpstreamAuth("oauth2", oauth=grant), TokenCache(), "k", on_rotated=keep
                )
                result = await call_operation(
                    egress,
                    base_url=upstream.base,
                    binding={"method": "GET", "path": "/status/401"},
                    arguments={},
                    timeout_s=10,
                    max_bytes=1 << 20,
                    authorizer=authorizer,
                )
                return result, authorizer.redactor()

        result, redactor = run(main())
        assert result.is_error is True and result.meta["status"] == 401
        api_calls = [r for r in upstream.requests if r["path"] == "/status/401"]
        assert len(api_calls) == 2 and auth_server.refreshes == 2
        first, second = (r["headers"]["authorization"] for r in api_calls)
        assert first != second and second == f"Bearer {auth_server.access_token}"
        # Each refresh rotated the refresh token; the second used the first's, the vault got both.
        assert len(rotated) == 2 and rotated[0] != rotated[1]
        assert rotated[-1].reveal() == auth_server.refresh_token
        # Both access tokens this call used are known to the redactor.
        assert redactor.text(f"{first} {second}") == f"Bearer {REDACTED} Bearer {REDACTED}"


def test_progress_and_log_messages_relayed_during_a_call_are_redacted_too() -> None:
    """VAULT-01 / I-4: secrets echoed in relayed progress and log messages are redacted."""
    from appliance.gateway.credentials import PreparedCall
    from appliance.mcpclient.session import LogRelay

    got: list[dict[str, Any]] = []
    prepared = PreparedCall(
        auth=UpstreamAuth("bearer", value=Secret("tok-123456789")), authorizer=None, max_bytes=1
    )
    progress, log = prepared.relays(got.append, LogRelay(level="info", deliver=got.append))
    assert progress is not None and log is not None
    progress({"progressToken": 1, "message": "using tok-123456789"})
    log.deliver({"level": "info", "data": {"header": "Bearer tok-123456789"}})
    assert got == [
        {"progressToken": 1, "message": f"using {REDACTED}"},
        {"level": "info", "data": {"header": f"Bearer {REDACTED}"}},
    ]
    assert log.level == "info"
    bare = PreparedCall(auth=None, authorizer=None, max_bytes=1)
    assert bare.relays(got.append, None) == (got.append, None)  # nothing to hide: untouched
