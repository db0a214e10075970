"""The embeddings provider on the egress path: capped answers, no redirects, pinned connects,
and the operator's origin opened for it alone (SSRF-09: every egress path).

Real OpenAI-compatible servers on loopback (tests/support/embeddings_server.py); the
resolvers are scripted to play DNS, as in test_egress_guard and test_egress_reuse.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from appliance import config
from appliance.egress.guard import EgressPolicy, Resolver
from appliance.errors import ConfigError, UpstreamError
from appliance.gateway.imports import import_openapi
from appliance.gateway.runtime import Runtime
from appliance.gateway.semantic import build_provider
from appliance.gateway.semantic_egress import EmbeddingsEgress
from appliance.search.embedders import ANSWER_MAX_DIMENSIONS, EmbeddingError, HttpEmbedder, answer_cap
from tests.support.embeddings_server import DIM, EmbeddingsServer, with_provider_runtime

T = TypeVar("T")
KEY = "sk-canary-7f3a9c"


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        async with asyncio.timeout(30):  # bound every test, whatever goes wrong
            return await coro

    return asyncio.run(main())


def scripted(*answers: str) -> tuple[Resolver, list[str]]:
    """A resolver giving ``answers`` in turn (the last one from then on), and its log."""
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return [answers[min(len(asked), len(answers)) - 1]]

    return resolver, asked


def embed(url: str, texts: list[str], *, resolver: Resolver | None = None, **kw: Any) -> np.ndarray:
    async def main() -> np.ndarray:
        emb = HttpEmbedder(url, "m", EmbeddingsEgress(url, resolver=resolver), api_key=KEY, **kw)
        try:
            return await emb.embed(texts, timeout_s=5)
        finally:
            await emb.aclose()

    return run(main())


def failure(url: str, texts: list[str] | None = None, **kw: Any) -> str:
    with pytest.raises(EmbeddingError) as caught:
        embed(url, texts or ["a"], **kw)
    reason = caught.value.reason
    assert KEY not in reason
    return reason


def test_an_answer_over_the_cap_is_refused_without_reading_it_all() -> None:
    """UP-04 for the embeddings path: an endless answer stops at the cap sized from the request."""
    cap = answer_cap(1, DIM)
    with EmbeddingsServer(mode="flood") as server:
        reason = failure(server.base_url, dimensions=DIM)
        assert server.flood_done.wait(10), "the endless answer was never cut off"
    assert reason == f"the embeddings endpoint answered with more than {cap} bytes (not read further)"
    # What the server got into the socket before we hung up: the cap plus kernel buffers,
    # nowhere near the 256 MiB it would have sent.
    assert server.flooded < 32 * 1024 * 1024


def test_the_cap_fits_an_honest_pretty_printed_answer_of_the_widest_assumed_width() -> None:
    longest = -2.2250738585072014e-308  # float64's longest repr: 24 characters
    data = [
        {"object": "embedding", "index": i, "embedding": [longest] * ANSWER_MAX_DIMENSIONS} for i in range(3)
    ]
    body = json.dumps(
        {"object": "list", "data": data, "model": "m" * 200, "usage": {"total_tokens": 9}}, indent=4
    )
    assert len(body.encode()) <= answer_cap(3, None)
    assert answer_cap(3, 64) < answer_cap(3, None) < answer_cap(4, None)


def test_a_redirect_is_not_followed() -> None:
    with EmbeddingsServer() as elsewhere:
        with EmbeddingsServer(mode="redirect", location=elsewhere.base_url + "/embeddings") as server:
            reason = failure(server.base_url)
        assert reason == "the embeddings endpoint answered HTTP 307, a redirect; redirects are not followed"
        assert (elsewhere.requests, elsewhere.connections) == ([], 0)


def test_the_request_goes_to_the_address_checked_for_it_never_to_a_second_answer() -> None:
    """SSRF-04 for the embeddings path: the name is resolved once per request, and the
    connection goes to that very answer, not to what DNS says a moment later."""
    resolver, asked = scripted("127.0.0.1", "127.0.0.2")
    with EmbeddingsServer() as checked, EmbeddingsServer(host="127.0.0.2", port=checked.port) as later:
        rows = embed(f"http://embed.test:{checked.port}/v1", ["list pets"], resolver=resolver)
        assert rows.shape == (1, DIM)
        assert asked == ["embed.test"]
        assert len(checked.requests) == 1 and checked.auth == [f"Bearer {KEY}"]
        assert (later.requests, later.connections) == ([], 0)


def test_a_configured_name_that_now_resolves_to_a_metadata_address_is_not_connected_to() -> None:
    """The operator trusted the name, not whatever it resolves to: link-local (cloud metadata)
    is refused at call time, and nothing is sent."""
    resolver, asked = scripted("127.0.0.1", "169.254.169.254")
    with EmbeddingsServer() as server:
        url = f"http://embed.test:{server.port}/v1"

        async def twice() -> str:
            emb = HttpEmbedder(url, "m", EmbeddingsEgress(url, resolver=resolver), api_key=KEY)
            try:
                await emb.embed(["first"], timeout_s=5)
                with pytest.raises(EmbeddingError) as caught:
                    await emb.embed(["second"], timeout_s=5)
                return caught.value.reason
            finally:
                await emb.aclose()

        reason = run(twice())
        assert server.requests == [["first"]]
    assert asked == ["embed.test", "embed.test"]
    assert reason.startswith(
        "the egress guard refused the embeddings endpoint: embed.test resolves to 169.254"
    )
    assert "link-local" in reason and KEY not in reason


@pytest.mark.parametrize(
    ("answer", "rule"),
    [
        ("127.0.0.1", None),
        ("10.1.2.3", None),
        ("172.18.0.5", None),  # a docker network: http://ollama:11434/v1
        ("100.100.1.1", None),  # a tailnet
        ("::1", None),
        ("fd12::1", None),
        ("93.184.216.34", None),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("198.18.0.1", "reserved"),
    ],
)
def test_a_configured_name_may_resolve_where_self_hosted_services_live_and_nowhere_else(
    answer: str, rule: str | None
) -> None:
    policy = EgressPolicy.for_operator_origin("http://ollama:11434/v1", resolver=scripted(answer)[0])
    if rule is None:
        assert [str(a) for a in run(policy.resolve("ollama", 11434))] == [answer]
    else:
        with pytest.raises(UpstreamError) as caught:
            run(policy.resolve("ollama", 11434))
        assert (caught.value.reason, caught.value.data["rule"]) == ("ssrf_blocked", rule)


def test_the_allowance_is_the_configured_origin_only() -> None:
    """Another port, another name on the same address, another address: the default guard."""
    named = EgressPolicy.for_operator_origin("http://ollama:11434/v1", resolver=scripted("172.18.0.5")[0])
    for host, port in (("ollama", 11435), ("other", 11434)):
        with pytest.raises(UpstreamError) as caught:
            run(named.resolve(host, port))
        assert caught.value.data == {"address": "172.18.0.5", "rule": "private"}
    literal = EgressPolicy.for_operator_origin("http://10.0.0.5:8080/v1")
    literal.check_url("http://10.0.0.5:8080/v1/embeddings")
    for url in ("http://10.0.0.5:8081/", "http://10.0.0.6:8080/", "http://127.0.0.1:8080/"):
        with pytest.raises(UpstreamError) as caught:
            literal.check_url(url)
        said = caught.value.public_message
        assert " is private;" in said or " is loopback;" in said, said
        assert "this path opens only the origin `url` names (ALLOWED_TOOL_CIDRS does not apply)" in said
    assert [str(a) for a in run(literal.resolve("10.0.0.5", 8080))] == ["10.0.0.5"]
    v6 = EgressPolicy.for_operator_origin("http://[::1]:11434/v1")
    assert [str(a) for a in run(v6.resolve("::1", 11434))] == ["::1"]
    with pytest.raises(UpstreamError, match="loopback"):
        v6.check_url("http://[::1]:11435/")
    local = EgressPolicy.for_operator_origin("http://localhost:11434/v1")
    assert [str(a) for a in run(local.resolve("localhost", 11434))] == ["127.0.0.1"]
    with pytest.raises(UpstreamError, match="loopback"):
        run(local.resolve("localhost", 11435))


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://10.0.0.5/v1", "scheme 'ftp' is not allowed"),
        ("http://user:pw@10.0.0.5/v1", "must not carry a user name or password"),
        ("http://0x7f.1:8080/v1", "malformed host"),
        ("http://", "has no host"),
    ],
)
def test_a_malformed_embeddings_url_stops_start_up_naming_the_setting(
    tmp_path: Path, url: str, says: str
) -> None:
    settings = config.load(
        cli={
            "data_dir": str(tmp_path),
            "embeddings": "openai",
            "embeddings_url": url,
            "embeddings_model": "m",
        },
        env={},
    )
    with pytest.raises(ConfigError) as caught:
        build_provider(settings)
    assert caught.value.field == "embeddings_url" and says in caught.value.public_message
    assert "pw" not in caught.value.public_message


def test_a_dns_failure_and_a_refused_connect_are_embedding_errors() -> None:
    async def nowhere(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    assert failure("http://embed.test:11434/v1", resolver=nowhere) == (
        "the embeddings endpoint is unreachable (DNS resolution failed for embed.test)"
    )
    with EmbeddingsServer() as server:
        url = server.base_url
    assert failure(url) == "the embeddings endpoint is unreachable (could not connect to 127.0.0.1)"


def keyed_runtime(tmp_path: Path, url: str, work: Callable[[Runtime], Awaitable[T]]) -> T:
    return with_provider_runtime(tmp_path, url, work, embeddings_api_key=KEY)


def test_the_embeddings_allowance_does_not_open_the_same_address_to_tool_calls(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SSRF-09 / I-1: the loopback embeddings URL works without ALLOWED_TOOL_CIDRS, while an
    OpenAPI toolkit on that very origin is refused at import and a call there at send time."""
    spec = {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/embeddings": {"post": {"operationId": "embed", "responses": {"200": {"description": "ok"}}}}
        },
    }
    with EmbeddingsServer() as server:

        async def work(rt: Runtime) -> tuple[bool, UpstreamError, UpstreamError]:
            vector = await rt.semantic.query_vector("list pets")
            spec["servers"] = [{"url": server.base_url}]
            with pytest.raises(UpstreamError) as at_import:
                await import_openapi(rt, "inline", slug="same", data=json.dumps(spec).encode())
            with pytest.raises(UpstreamError) as at_send:
                await rt.egress.send("POST", server.base_url + "/embeddings", content=b"{}")
            return vector is not None, at_import.value, at_send.value

        with caplog.at_level(logging.DEBUG):
            embedded, at_import, at_send = keyed_runtime(tmp_path, server.base_url, work)
        assert embedded and server.auth == [f"Bearer {KEY}"]
        assert (at_import.reason, at_import.field) == ("ssrf_blocked", "base_url")
        assert at_send.reason == "ssrf_blocked" and at_send.data["rule"] == "loopback"
        assert len(server.requests) == 1  # the query's embedding, nothing else
    assert KEY not in caplog.text


def test_a_failing_endpoint_trips_the_breaker_with_a_reason_that_names_no_key(tmp_path: Path) -> None:
    with EmbeddingsServer(mode="flood") as server:

        async def work(rt: Runtime) -> tuple[Any, str, bool]:
            vector = await rt.semantic.query_vector("list pets")
            return vector, rt.semantic.last_error, rt.semantic.breaker_open()

        vector, last_error, tripped = keyed_runtime(tmp_path, server.base_url, work)
        assert server.flood_done.wait(10)
    assert vector is None and tripped
    assert (
        last_error
        == f"the embeddings endpoint answered with more than {answer_cap(1, None)} bytes (not read further)"
    )
