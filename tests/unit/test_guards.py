"""The Origin check on its own: a malformed Origin is a refusal, never an internal error."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from appliance.config import load
from appliance.errors import Forbidden
from appliance.web.guards import check_origin


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
