"""Calling an OpenAPI operation: what the upstream really receives, and what the agent gets back.

Requests go to a real HTTP server on loopback that echoes what it received.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Iterator
from dataclasses import asdict
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import pytest

from appliance.egress.guard import EgressPolicy
from appliance.egress.openapi_call import call_operation, to_call_result
from appliance.egress.transport import Egress, HttpResponse
from appliance.errors import ArgumentsInvalid, UpstreamError
from appliance.models import CallResult, HttpBinding, ParamBinding
from tests.support.recording_upstream import RecordingServer, serving

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        async with asyncio.timeout(20):
            return await coro

    return asyncio.run(main())


@pytest.fixture
def upstream() -> Iterator[RecordingServer]:
    with serving() as server:
        yield server


def binding(method: str, path: str, *params: ParamBinding, **body: Any) -> dict[str, Any]:
    return asdict(HttpBinding(method=method, path=path, params=params, **body))


def call(
    upstream: RecordingServer,
    bind: dict[str, Any],
    arguments: dict[str, Any],
    *,
    base: str = "/api/v3",
    extra_headers: dict[str, str] | None = None,
) -> tuple[CallResult, dict[str, Any]]:
    """Make the call; return its result and the request the server saw."""

    async def go() -> CallResult:
        async with Egress(EgressPolicy(("127.0.0.1/32",))) as egress:
            return await call_operation(
                egress,
                base_url=upstream.base + base,
                binding=bind,
                arguments=arguments,
                timeout_s=5,
                max_bytes=65536,
                extra_headers=extra_headers,
            )

    result = run(go())
    return result, upstream.requests[-1]


def path_of(seen: dict[str, Any]) -> str:
    return str(seen["path"]).split("?", 1)[0]


def query_of(seen: dict[str, Any]) -> list[tuple[str, str]]:
    path = str(seen["path"])
    return parse_qsl(path.split("?", 1)[1], keep_blank_values=True) if "?" in path else []


PET_ID = ParamBinding(arg="petId", name="petId", location="path")


# --- the URL ---------------------------------------------------------------------------------


def test_the_base_path_is_kept_and_the_path_template_is_filled(upstream: RecordingServer) -> None:
    result, seen = call(upstream, binding("GET", "/echo/pet/{petId}", PET_ID), {"petId": 1})
    assert path_of(seen) == "/api/v3/echo/pet/1"
    assert seen["method"] == "GET"
    assert result.is_error is False
    assert result.meta == {"status": 200}
    assert result.structured["path"] == "/api/v3/echo/pet/1"


@pytest.mark.parametrize(
    ("value", "segment"),
    [
        ("../../admin", "..%2F..%2Fadmin"),
        ("a/b?c#d", "a%2Fb%3Fc%23d"),
        ("..", "%2E%2E"),
        (".", "%2E"),
        ("http://evil.test/", "http%3A%2F%2Fevil.test%2F"),
        ("100%", "100%25"),
        ("naïve space", "na%C3%AFve%20space"),
    ],
)
def test_a_path_argument_stays_one_segment_whatever_it_contains(
    upstream: RecordingServer, value: str, segment: str
) -> None:
    """SSRF-08: an absolute URL in a path parameter stays one encoded segment on the configured host."""
    _, seen = call(upstream, binding("GET", "/echo/files/{petId}/raw", PET_ID), {"petId": value})
    assert path_of(seen) == f"/api/v3/echo/files/{segment}/raw"
    assert seen["headers"]["host"] == f"127.0.0.1:{upstream.port}"


def test_a_missing_path_argument_is_refused_naming_it(upstream: RecordingServer) -> None:
    with pytest.raises(ArgumentsInvalid) as caught:
        call(upstream, binding("GET", "/echo/{petId}", PET_ID), {})
    assert caught.value.field == "/petId"
    assert upstream.connections == 0


def test_a_binding_base_url_overrides_the_toolkits(upstream: RecordingServer) -> None:
    bind = binding("GET", "/echo/x") | {"base_url": upstream.base + "/other"}
    _, seen = call(upstream, bind, {}, base="/ignored")
    assert path_of(seen) == "/other/echo/x"


def test_query_arrays_explode_booleans_are_words_and_none_is_left_out(upstream: RecordingServer) -> None:
    bind = binding(
        "GET",
        "/echo/find",
        ParamBinding(arg="tags", name="tags", location="query"),
        ParamBinding(arg="ids", name="id", location="query", explode=False),
        ParamBinding(arg="live", name="live", location="query"),
        ParamBinding(arg="limit", name="limit", location="query"),
        ParamBinding(arg="skip", name="skip", location="query"),
        ParamBinding(arg="filter", name="filter", location="query", style="deepObject"),
    )
    args = {"tags": ["a b", "c&d"], "ids": [1, 2], "live": True, "limit": 5, "skip": None, "filter": {"x": 1}}
    _, seen = call(upstream, bind, args)
    assert query_of(seen) == [
        ("tags", "a b"),
        ("tags", "c&d"),
        ("id", "1,2"),
        ("live", "true"),
        ("limit", "5"),
        ("filter[x]", "1"),
    ]


def test_the_base_urls_own_query_is_kept(upstream: RecordingServer) -> None:
    bind = binding("GET", "/echo", ParamBinding(arg="q", name="q", location="query"))
    _, seen = call(upstream, bind, {"q": "x"}, base="?api-version=2")
    assert query_of(seen) == [("api-version", "2"), ("q", "x")]


# --- headers and cookies ------------------------------------------------------------------------


def test_header_and_cookie_parameters_arrive(upstream: RecordingServer) -> None:
    bind = binding(
        "GET",
        "/echo",
        ParamBinding(arg="trace", name="X-Trace-Id", location="header"),
        ParamBinding(arg="langs", name="X-Langs", location="header"),
        ParamBinding(arg="session", name="session", location="cookie"),
        ParamBinding(arg="odd", name="odd", location="cookie"),
    )
    args = {"trace": "abc-123", "langs": ["en", "fr"], "session": "s1", "odd": "a b;c=d"}
    _, seen = call(upstream, bind, args, extra_headers={"Authorization": "Bearer vault"})
    headers = seen["headers"]
    assert headers["x-trace-id"] == "abc-123"
    assert headers["x-langs"] == "en,fr"
    assert headers["cookie"] == "session=s1; odd=a%20b%3Bc=d"
    assert headers["authorization"] == "Bearer vault"


@pytest.mark.parametrize("value", ["a\r\nX-Evil: 1", "a\nb", "nul\0"])
def test_a_header_value_with_a_line_break_is_refused(upstream: RecordingServer, value: str) -> None:
    bind = binding("GET", "/echo", ParamBinding(arg="trace", name="X-Trace", location="header"))
    with pytest.raises(ArgumentsInvalid) as caught:
        call(upstream, bind, {"trace": value})
    assert caught.value.field == "/trace"
    assert upstream.connections == 0


@pytest.mark.parametrize("name", ["Host", "X-Forwarded-Host", "X-Original-URL", "X-Rewrite-URL"])
def test_host_routing_headers_cannot_be_set_by_an_agent(upstream: RecordingServer, name: str) -> None:
    """SSRF-08: Host, X-Forwarded-Host, X-Original-URL and X-Rewrite-URL from agents are refused."""
    bind = binding("GET", "/echo", ParamBinding(arg="h", name=name, location="header"))
    with pytest.raises(ArgumentsInvalid) as caught:
        call(upstream, bind, {"h": "169.254.169.254"})
    assert caught.value.field == "/h"
    assert upstream.connections == 0


def test_the_owners_credential_header_wins_over_an_agent_argument(upstream: RecordingServer) -> None:
    bind = binding("GET", "/echo", ParamBinding(arg="auth", name="Authorization", location="header"))
    _, seen = call(upstream, bind, {"auth": "Bearer agent"}, extra_headers={"Authorization": "Bearer vault"})
    assert [v for k, v in seen["header_list"] if k.lower() == "authorization"] == ["Bearer vault"]


# --- bodies ---------------------------------------------------------------------------------------


def test_a_json_body_is_sent_as_json(upstream: RecordingServer) -> None:
    bind = binding("POST", "/echo/pet", body_arg="body", body_media_type="application/json")
    pet = {"name": "Rex", "tags": ["good"], "age": 3, "vip": False}
    _, seen = call(upstream, bind, {"body": pet})
    assert seen["method"] == "POST"
    assert seen["headers"]["content-type"] == "application/json"
    assert json.loads(seen["body"]) == pet


def test_flattened_body_fields_make_a_json_object(upstream: RecordingServer) -> None:
    bind = binding("PUT", "/echo/pet", body_media_type="application/json", body_fields=("name", "age"))
    _, seen = call(upstream, bind, {"name": "Rex", "age": 3, "unrelated": 1})
    assert json.loads(seen["body"]) == {"name": "Rex", "age": 3}


def test_a_form_body_is_urlencoded(upstream: RecordingServer) -> None:
    bind = binding(
        "POST",
        "/echo/form",
        body_media_type="application/x-www-form-urlencoded",
        body_fields=("name", "tags", "ok", "gone"),
    )
    _, seen = call(upstream, bind, {"name": "Rex & co", "tags": ["a", "b"], "ok": True, "gone": None})
    assert seen["headers"]["content-type"] == "application/x-www-form-urlencoded"
    assert parse_qsl(seen["body"]) == [("name", "Rex & co"), ("tags", "a"), ("tags", "b"), ("ok", "true")]


def test_a_multipart_body_carries_one_part_per_field(upstream: RecordingServer) -> None:
    bind = binding(
        "POST", "/echo/upload", body_media_type="multipart/form-data", body_fields=("name", "meta")
    )
    _, seen = call(upstream, bind, {"name": "Rex", "meta": {"a": 1}})
    ctype = seen["headers"]["content-type"]
    assert ctype.startswith("multipart/form-data; boundary=")
    boundary = ctype.split("boundary=", 1)[1]
    body = seen["body"]
    assert body.endswith(f"--{boundary}--\r\n")
    assert 'Content-Disposition: form-data; name="name"\r\n\r\nRex\r\n' in body
    assert 'name="meta"\r\nContent-Type: application/json\r\n\r\n{"a":1}\r\n' in body


def test_no_body_argument_means_no_body(upstream: RecordingServer) -> None:
    _, seen = call(upstream, binding("POST", "/echo", body_arg="body"), {})
    assert seen["body"] == ""
    assert "content-type" not in seen["headers"]


# --- the answer --------------------------------------------------------------------------------------


def test_an_http_error_status_is_an_error_result_with_the_status(upstream: RecordingServer) -> None:
    result, _ = call(upstream, binding("GET", "/status/404"), {}, base="")
    assert result.is_error is True
    assert result.meta == {"status": 404, "reason": "upstream_http_error"}
    assert result.content[0]["text"].startswith("HTTP 404 Not Found")


def test_transport_failures_are_raised_as_upstream_errors(upstream: RecordingServer) -> None:
    """UP-06 / I-7: transport failures become upstream errors with a reason, no traceback."""
    with pytest.raises(UpstreamError) as caught:
        call(upstream, binding("GET", "/redirect"), {}, base="")
    assert caught.value.reason == "upstream_redirect"


def test_a_toolkit_without_a_base_url_has_no_upstream(upstream: RecordingServer) -> None:
    async def go() -> CallResult:
        async with Egress(EgressPolicy()) as egress:
            return await call_operation(
                egress, base_url="", binding=binding("GET", "/x"), arguments={}, timeout_s=1, max_bytes=10
            )

    with pytest.raises(UpstreamError) as caught:
        run(go())
    assert caught.value.reason == "no_upstream"


def answer(status: int, body: bytes, ctype: str = "") -> CallResult:
    return to_call_result(HttpResponse(status, {"content-type": ctype} if ctype else {}, body, "http://x/"))


def test_a_json_object_is_text_and_structured_content() -> None:
    result = answer(200, b'{"id": 1}', "application/json; charset=utf-8")
    assert result.content == [{"type": "text", "text": '{"id": 1}'}]
    assert result.structured == {"id": 1}


def test_a_json_array_is_text_only_because_structured_content_must_be_an_object() -> None:
    result = answer(200, b"[1, 2]", "application/problem+json")
    assert result.content[0]["text"] == "[1, 2]"
    assert result.structured is None


def test_invalid_json_with_a_json_type_is_passed_on_as_text() -> None:
    """UP-06: invalid JSON with a JSON type is passed on as text, never a crash."""
    result = answer(200, b"{oops", "application/json")
    assert (result.content[0]["text"], result.structured, result.is_error) == ("{oops", None, False)


def test_text_is_decoded_with_its_charset() -> None:
    assert answer(200, "café".encode("latin-1"), "text/plain; charset=latin-1").content[0]["text"] == "café"
    assert answer(200, b"<a/>", "application/atom+xml").content[0]["text"] == "<a/>"


def test_binary_is_described_not_returned() -> None:
    result = answer(200, b"\x89PNG\r\n\x1a\n\0\0", "image/png")
    assert result.content == [{"type": "text", "text": "Binary response: image/png, 10 bytes (not shown)"}]


def test_an_empty_success_says_its_status() -> None:
    """UP-06: an empty 200 says its status."""
    assert answer(204, b"").content[0]["text"] == "HTTP 204 No Content"
    assert answer(200, b"", "application/json").structured is None


@pytest.mark.parametrize(
    "body",
    [
        b'{"x": NaN}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"name": "caf\xe9 \xff\xfe"}',
        b"<html><body><h1>502 Bad Gateway</h1></body></html>",
    ],
    ids=["nan", "nested-1e5", "not-utf8", "html-page"],
)
def test_a_hostile_json_body_is_relayed_as_bounded_text_never_a_crash(body: bytes) -> None:
    """UP-06 / I-7: NaN, 10^5 levels of nesting, invalid UTF-8 or an HTML page sent as
    application/json never raise (no RecursionError, no UnicodeDecodeError): the answer is text."""
    result = answer(200, body, "application/json")
    assert result.structured is None and result.is_error is False
    text = result.content[0]["text"]
    assert isinstance(text, str) and 0 < len(text) <= len(body)


def test_an_html_502_page_is_an_error_result_naming_the_status() -> None:
    """UP-06: an HTML 502 from the upstream is an isError result with the status."""
    result = answer(502, b"<html><h1>502 Bad Gateway</h1></html>", "text/html")
    assert result.is_error is True
    assert result.meta == {"status": 502, "reason": "upstream_http_error"}
    assert result.content[0]["text"].startswith("HTTP 502")
