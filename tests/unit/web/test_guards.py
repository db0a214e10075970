"""The Origin check on its own: a malformed Origin is a refusal, never an internal error."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from appliance.config import load
from appliance.errors import Forbidden
from appliance.web.guards import MisdirectedRequest, check_host, check_origin


def request(origin: str) -> Any:
    return cast(Any, SimpleNamespace(headers={"origin": origin}))


@pytest.mark.parametrize("origin", ["http://[::1", "http://[127.0.0.1]", "https://[fe80::1%]"])
def test_an_origin_that_is_no_url_is_refused_with_403_naming_the_field(origin: str) -> None:
    # Found by the protocol fuzz: urlsplit raised ValueError ("Invalid IPv6 URL"), answered 500.
    with pytest.raises(Forbidden) as refused:
        check_origin(request(origin), load(env={}))
    assert refused.value.http_status == 403 and refused.value.field == "origin"


def test_a_loopback_origin_still_passes() -> None:
    for origin in ("http://127.0.0.1", "http://localhost:3000", "http://[::1]:8765"):
        check_origin(request(origin), load(env={}))


@pytest.mark.parametrize("host", ["[::1]evil", "[::1]evil.example:80", "127.0.0.1:evil", "localhost:80x"])
def test_a_host_that_is_no_name_and_port_is_misdirected(host: str) -> None:
    # Found by the protocol fuzz: "[::1]evil" was read as "[::1]" and served.
    with pytest.raises(MisdirectedRequest):
        check_host(cast(Any, SimpleNamespace(headers={"host": host})), load(env={}))


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8765", "[::1]:8765", "[::1]", "LOCALHOST:1"])
def test_a_loopback_host_with_or_without_a_port_is_served(host: str) -> None:
    check_host(cast(Any, SimpleNamespace(headers={"host": host})), load(env={}))
