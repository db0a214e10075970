"""The egress seam: address policy, resolution, URL checks and the guarded transport.

Real I/O goes to a real HTTP server on loopback (tests/support/recording_upstream.py), opened
by listing 127.0.0.1/32 exactly as an operator would with ALLOWED_TOOL_CIDRS.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from appliance.config import load
from appliance.egress.guard import EgressPolicy
from appliance.egress.transport import Egress
from appliance.errors import UpstreamError
from tests.support.recording_upstream import RecordingServer, self_signed, serving

T = TypeVar("T")
LOOPBACK_OPEN = ("127.0.0.1/32",)


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        async with asyncio.timeout(20):  # bound every test, whatever goes wrong
            return await coro

    return asyncio.run(main())


def fixed(answers: dict[str, list[str]]) -> Callable[[str, int], Awaitable[list[str]]]:
    async def resolver(host: str, port: int) -> list[str]:
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return answers[host]

    return resolver


def refusal(coro: Awaitable[Any]) -> UpstreamError:
    with pytest.raises(UpstreamError) as caught:
        run(coro)
    return caught.value


@pytest.fixture
def upstream() -> Iterator[RecordingServer]:
    with serving() as server:
        yield server


# --- address policy -----------------------------------------------------------------------

ADDRESS_TABLE = [
    ("10.0.0.1", "private"),
    ("172.16.5.4", "private"),
    ("192.168.1.1", "private"),
    ("127.0.0.1", "loopback"),
    ("169.254.169.254", "link-local"),
    ("100.64.0.1", "shared (100.64/10)"),
    ("fc00::1", "private"),
    ("fd00:ec2::254", "private"),
    ("fe80::1", "link-local"),
    ("::1", "loopback"),
    ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:169.254.169.254", "link-local"),
    ("2002:7f00:1::", "loopback"),
    ("64:ff9b::a00:1", "private"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "reserved"),  # Teredo; client 192.0.2.45
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("255.255.255.255", "reserved"),
    ("192.0.0.8", "reserved"),
    ("198.18.0.1", "reserved"),
    ("fec0::1", "site-local"),
    ("::7f00:1", "reserved"),
    ("8.8.8.8", None),
    ("2606:4700::1111", None),
    ("::ffff:8.8.8.8", None),
    ("64:ff9b::808:808", None),
]


@pytest.mark.parametrize(("address", "rule"), ADDRESS_TABLE)
def test_only_globally_routable_addresses_are_allowed_by_default(address: str, rule: str | None) -> None:
    """SSRF-01: loopback, private, link-local, unspecified, multicast and broadcast are refused by default."""
    assert EgressPolicy().check_address(address) == rule


def test_a_listed_network_opens_itself_and_its_mapped_form_but_nothing_else() -> None:
    """SSRF-10: a listed range opens only itself and its mapped form; loopback and metadata stay blocked."""
    policy = EgressPolicy(("10.0.0.0/8",))
    assert policy.check_address("10.1.2.3") is None
    assert policy.check_address("::ffff:10.1.2.3") is None
    assert policy.check_address("64:ff9b::a01:203") is None
    assert policy.check_address("127.0.0.1") == "loopback"
    assert policy.check_address("169.254.169.254") == "link-local"
    assert policy.check_address("11.0.0.1") is None  # public anyway
    metadata = EgressPolicy(("169.254.169.254/32",))  # opened only when listed exactly
    assert (metadata.check_address("169.254.169.254"), metadata.check_address("169.254.169.253")) == (
        None,
        "link-local",
    )


def test_a_refusal_names_the_address_the_rule_and_the_way_to_allow_it() -> None:
    """SSRF-01: a refusal names the address, the rule and ALLOWED_TOOL_CIDRS."""
    error = EgressPolicy().refusal("169.254.169.254")
    assert error is not None
    assert error.reason == "ssrf_blocked"
    assert error.public_message == "169.254.169.254 is link-local; allow it only via ALLOWED_TOOL_CIDRS"
    assert error.payload() == {"reason": "ssrf_blocked", "address": "169.254.169.254", "rule": "link-local"}


# --- resolution -----------------------------------------------------------------------------


def test_a_name_is_refused_when_any_answer_is_disallowed() -> None:
    """SSRF-04: a name with any internal answer (mixed answer set) is refused naming the address."""
    policy = EgressPolicy(resolver=fixed({"mixed.test": ["93.184.216.34", "127.0.0.1"]}))
    error = refusal(policy.resolve("mixed.test", 80))
    assert error.reason == "ssrf_blocked"
    assert error.data["address"] == "127.0.0.1"
    assert "mixed.test resolves to 127.0.0.1" in error.public_message


def test_an_internal_aaaa_answer_refuses_the_name() -> None:
    """SSRF-04: a public A answer with an internal AAAA answer refuses the name."""
    policy = EgressPolicy(resolver=fixed({"v6.test": ["93.184.216.34", "::1"]}))
    assert refusal(policy.resolve("v6.test", 443)).data["rule"] == "loopback"


def test_public_answers_resolve_deduplicated_in_order() -> None:
    answers = fixed({"ok.test": ["8.8.8.8", "2606:4700::1111", "8.8.8.8"]})
    resolved = run(EgressPolicy().resolve("ok.test", 443, resolver=answers))  # per-call resolver
    assert [str(a) for a in resolved] == ["8.8.8.8", "2606:4700::1111"]


def test_a_dns_failure_fails_closed_as_upstream_unavailable() -> None:
    """SSRF-04: NXDOMAIN or SERVFAIL fails closed as upstream_unavailable naming the host."""
    policy = EgressPolicy(resolver=fixed({}))
    error = refusal(policy.resolve("nxdomain.test", 80))
    assert error.reason == "upstream_unavailable"
    assert error.public_message == "DNS resolution failed for nxdomain.test"
    empty = EgressPolicy(resolver=fixed({"empty.test": []}))
    assert refusal(empty.resolve("empty.test", 80)).reason == "upstream_unavailable"


@pytest.mark.parametrize(
    "host",
    ["2130706433", "0x7f000001", "017700000001", "0177.0.0.1", "0x7f.1", "127.1", "127.000.000.001",
     "0xA9FEA9FE", "2852039166", "0251.0376.0251.0376", "127.0.0.1."],
)  # fmt: skip
def test_odd_ipv4_spellings_are_refused_before_any_resolution(host: str) -> None:
    """SSRF-02: decimal, hex, octal and short IPv4 spellings never reach the resolver or a socket."""
    calls: list[str] = []

    async def spy(name: str, port: int) -> list[str]:
        calls.append(name)
        return ["8.8.8.8"]

    assert refusal(EgressPolicy(resolver=spy).resolve(host, 80)).reason == "ssrf_blocked"
    assert calls == []
    assert refusal(_check(f"http://{host}/")).reason == "ssrf_blocked"


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST", "localhost."])
def test_localhost_names_resolve_to_loopback_and_are_refused(host: str) -> None:
    """SSRF-02: localhost, LOCALHOST and localhost. are judged as loopback and refused."""
    error = refusal(EgressPolicy().resolve(host, 80))  # the system resolver, off the loop
    assert error.reason == "ssrf_blocked"
    assert error.data["rule"] == "loopback"


# --- URL checks -----------------------------------------------------------------------------


async def _check(url: str) -> Any:
    return EgressPolicy().check_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "gopher://127.0.0.1:6379/_x",
        "dict://example.com/",
        "ftp://example.com/",
        "ws://example.com/",
        "data:text/plain,hi",
        "http://user:pass@example.com/",
        "http://allowed.example@127.0.0.1/",
        "http:///nohost",
        "http://%31%32%37.0.0.1/",
        "http://allowed.example%00.evil/",
        "http://127.0.0.1#@allowed.example/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://0.0.0.0:8080/",
        "http://169.254.169.254/latest/meta-data/",
        "http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/",  # fullwidth "localhost"
    ],
)
def test_urls_with_other_schemes_userinfo_or_internal_literals_are_refused(url: str) -> None:
    """SSRF-07: other schemes, userinfo, ambiguous authorities and IDN localhost are refused."""
    error = refusal(_check(url))
    assert error.reason == "ssrf_blocked"
    assert error.field == "url"


def test_a_good_url_comes_back_as_the_parsed_object_to_send() -> None:
    """SSRF-07: the parsed object that was checked is the one handed to the HTTP client."""
    parsed = EgressPolicy().check_url("https://api.example.com:8443/v1?x=1")
    assert (parsed.scheme, parsed.host, parsed.port, parsed.path) == ("https", "api.example.com", 8443, "/v1")
    assert EgressPolicy().check_url(parsed) is parsed


def test_registration_errors_name_the_field_they_were_given() -> None:
    """SSRF-01/SSRF-07: a registration refusal names the field it was given."""
    with pytest.raises(UpstreamError) as caught:
        EgressPolicy().check_url("http://10.0.0.5/", field="base_url")
    assert caught.value.field == "base_url"
    assert caught.value.data["rule"] == "private"


# --- the guarded transport against a real server --------------------------------------------


def test_an_allowed_target_is_reached_and_answers(upstream: RecordingServer) -> None:
    async def go() -> Any:
        async with Egress(EgressPolicy(LOOPBACK_OPEN)) as egress:
            return await egress.send("GET", upstream.base + "/echo?a=1")

    response = run(go())
    assert response.status == 200
    assert response.url == upstream.base + "/echo?a=1"
    assert upstream.requests[0]["path"] == "/echo?a=1"
    assert upstream.requests[0]["headers"]["accept-encoding"] == "gzip, deflate"


def test_a_blocked_target_is_refused_without_any_connection(upstream: RecordingServer) -> None:
    """SSRF-01 / I-1: a blocked target is ssrf_blocked and no connection is opened."""

    async def go(url: str, resolver: Any = None) -> Any:
        async with Egress(EgressPolicy(resolver=resolver)) as egress:
            return await egress.send("GET", url)

    assert refusal(go(upstream.base + "/echo")).reason == "ssrf_blocked"
    assert refusal(go(f"http://localhost:{upstream.port}/echo")).reason == "ssrf_blocked"
    assert refusal(go(f"http://[::ffff:127.0.0.1]:{upstream.port}/echo")).reason == "ssrf_blocked"
    assert refusal(go(f"http://0x7f.1:{upstream.port}/echo")).reason == "ssrf_blocked"
    internal = fixed({"internal.test": ["127.0.0.1"]})
    assert refusal(go(f"http://internal.test:{upstream.port}/echo", internal)).reason == "ssrf_blocked"
    assert upstream.connections == 0


def test_the_transport_connects_to_the_checked_address_and_keeps_the_host_header(
    upstream: RecordingServer,
) -> None:
    """SSRF-04: the connection goes to the checked address, never a second resolution."""
    calls: list[str] = []

    async def once(host: str, port: int) -> list[str]:
        calls.append(host)
        # A rebinding resolver: the first answer passes the check, later ones would not.
        return ["127.0.0.1"] if len(calls) == 1 else ["10.0.0.7"]

    async def go() -> Any:
        async with Egress(EgressPolicy(LOOPBACK_OPEN, resolver=once)) as egress:
            return await egress.send("GET", f"http://upstream.test:{upstream.port}/echo")

    assert run(go()).status == 200
    assert calls == ["upstream.test"]  # resolved once; the connect used that very answer
    assert upstream.requests[0]["headers"]["host"] == f"upstream.test:{upstream.port}"


def test_settings_build_an_egress_with_their_cidrs_timeout_and_cap(
    upstream: RecordingServer, tmp_path: Path
) -> None:
    env = {
        "ALLOWED_TOOL_CIDRS": "127.0.0.1/32",
        "TOOLSPOKE_UPSTREAM_TIMEOUT_S": "7",
        "TOOLSPOKE_UPSTREAM_MAX_BYTES": "1000",
        "TOOLSPOKE_DATA_DIR": str(tmp_path),
    }
    settings = load(env=env)

    async def go() -> Any:
        async with Egress(settings) as egress:
            assert (egress.timeout_s, egress.max_bytes) == (7.0, 1000)
            return await egress.send("GET", upstream.base + "/big")

    assert refusal(go()).reason == "upstream_too_large"


def test_a_trickling_server_hits_the_total_deadline(upstream: RecordingServer) -> None:
    """UP-01: the deadline is total, so a server trickling bytes is cut as upstream_timeout."""

    async def go() -> Any:
        async with Egress(EgressPolicy(LOOPBACK_OPEN), timeout_s=5) as egress:
            return await egress.send("GET", upstream.base + "/trickle", timeout_s=0.5)

    started = time.monotonic()
    error = refusal(go())
    assert error.reason == "upstream_timeout"
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize("path", ["/big", "/big-stream"])
def test_a_body_over_the_cap_is_upstream_too_large(upstream: RecordingServer, path: str) -> None:
    """UP-04: a body over the cap is upstream_too_large stating the cap."""

    async def go() -> Any:
        async with Egress(EgressPolicy(LOOPBACK_OPEN)) as egress:
            return await egress.send("GET", upstream.base + path, max_bytes=256 * 1024)

    assert refusal(go()).reason == "upstream_too_large"


def test_a_gzip_bomb_stops_at_the_cap_without_inflating_it(upstream: RecordingServer) -> None:
    """UP-04: a compressed body is counted after decoding and cut at the cap."""

    async def go() -> Any:
        async with Egress(EgressPolicy(LOOPBACK_OPEN)) as egress:
            return await egress.send("GET", upstream.base + "/bomb", max_bytes=256 * 1024)

    started = time.monotonic()
    assert refusal(go()).reason == "upstream_too_large"
    assert time.monotonic() - started < 5


def test_a_gzip_body_is_decoded(upstream: RecordingServer) -> None:
    async def go() -> Any:
        async with Egress(EgressPolicy(LOOPBACK_OPEN)) as egress:
            return await egress.send("GET", upstream.base + "/gzip")

    response = run(go())
    assert response.body == b"hello gzip"
    assert "content-encoding" not in response.headers


def test_a_redirect_is_not_followed_and_names_the_location_without_its_query(
    upstream: RecordingServer,
) -> None:
    """SSRF-07 (D-3) / I-1: a redirect to metadata is not followed and only one request is made."""

    async def go() -> Any:
        async with Egress(EgressPolicy(LOOPBACK_OPEN)) as egress:
            return await egress.send("GET", upstream.base + "/redirect")

    error = refusal(go())
    assert error.reason == "upstream_redirect"
    assert "http://169.254.169.254/latest/meta-data/" in error.public_message
    assert "SECRET" not in error.public_message
    assert len(upstream.requests) == 1


def test_tls_to_a_plain_http_server_is_upstream_tls(upstream: RecordingServer) -> None:
    """UP-07: a TLS failure fails closed as upstream_tls."""

    async def go() -> Any:
        async with Egress(EgressPolicy(LOOPBACK_OPEN)) as egress:
            return await egress.send("GET", f"https://127.0.0.1:{upstream.port}/echo")

    assert refusal(go()).reason == "upstream_tls"


def test_tls_is_verified_against_the_original_name_while_connecting_to_the_pinned_address(
    tmp_path: Path,
) -> None:
    """UP-07: an untrusted or mismatched certificate is upstream_tls; TLS verifies the original name."""
    cert, key = self_signed(tmp_path, "upstream.test")
    trust = ssl.create_default_context(cafile=str(cert))
    names = fixed({"upstream.test": ["127.0.0.1"], "wrong.test": ["127.0.0.1"]})

    async def go(url: str) -> Any:
        async with Egress(EgressPolicy(LOOPBACK_OPEN, resolver=names), verify=trust) as egress:
            return await egress.send("GET", url)

    with serving(tls=(cert, key)) as server:
        response = run(go(f"https://upstream.test:{server.port}/echo"))
        assert response.status == 200
        assert server.requests[0]["headers"]["host"] == f"upstream.test:{server.port}"
        # Same address, another name: the certificate does not match, so the call fails.
        assert refusal(go(f"https://wrong.test:{server.port}/echo")).reason == "upstream_tls"


def test_a_refused_connection_is_upstream_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before the call: nobody listens

    async def go() -> Any:
        async with Egress(EgressPolicy(LOOPBACK_OPEN)) as egress:
            return await egress.send("GET", f"http://127.0.0.1:{port}/")

    error = refusal(go())
    assert error.reason == "upstream_unavailable"
    assert "Traceback" not in error.public_message


def test_fetch_document_returns_the_body_and_fails_on_http_errors(upstream: RecordingServer) -> None:
    async def go(path: str) -> bytes:
        async with Egress(EgressPolicy(LOOPBACK_OPEN)) as egress:
            return await egress.fetch_document(upstream.base + path, max_bytes=1000)

    assert run(go("/gzip")) == b"hello gzip"
    error = refusal(go("/status/404"))
    assert (error.reason, error.data["status"]) == ("upstream_unavailable", 404)
    assert refusal(go("/big")).reason == "upstream_too_large"


def test_an_origin_served_in_process_opens_nothing_else(upstream: RecordingServer) -> None:
    """The demo API is answered in process at its reserved origin: exactly that origin, no
    socket; the appliance's own loopback and every other port stay refused, as before."""
    asked: list[tuple[str, str, bytes]] = []

    async def service(method: str, target: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        asked.append((method, target, body))
        return 201, {"content-type": "application/json"}, b'{"ok":true}'

    async def go(url: str, **options: Any) -> Any:
        async with Egress(EgressPolicy()) as egress:
            egress.serve_locally("http://demo.toolspoke.invalid", service)
            return await egress.send("POST", url, **options)

    answer = run(go("http://demo.toolspoke.invalid/demo/api/notes?x=1", content=b"{}"))
    assert (answer.status, answer.body, answer.headers["content-type"]) == (
        201,
        b'{"ok":true}',
        "application/json",
    )
    assert asked == [("POST", "/demo/api/notes?x=1", b"{}")]
    assert refusal(go(upstream.base + "/echo")).reason == "ssrf_blocked"  # loopback: still refused
    assert refusal(go("http://127.0.0.1:80/demo/api/notes")).reason == "ssrf_blocked"
    # Another port or scheme of the reserved name is not the served origin: it is looked up
    # like any name, and .invalid never resolves.
    assert refusal(go("http://demo.toolspoke.invalid:8080/demo/api/notes")).reason == "upstream_unavailable"
    assert refusal(go("https://demo.toolspoke.invalid/demo/api/notes")).reason == "upstream_unavailable"
    assert len(asked) == 1 and upstream.requests == []
