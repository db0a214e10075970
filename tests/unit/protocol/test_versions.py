"""The MCP revisions and the era rule, shared by every face and the upstream client."""

from __future__ import annotations

import pytest

from appliance.protocol import versions
from appliance.protocol.log_levels import LOG_LEVELS, log_rank
from appliance.protocol.meta import progress_token


def test_the_revisions_are_newest_first_and_the_modern_one_leads_the_full_list() -> None:
    assert tuple(sorted(versions.LEGACY_VERSIONS, reverse=True)) == versions.LEGACY_VERSIONS
    assert versions.LATEST_LEGACY == "2025-11-25"
    assert ("2026-07-28", *versions.LEGACY_VERSIONS) == versions.ALL_VERSIONS


@pytest.mark.parametrize(
    ("requested", "answered"),
    [
        ("2025-06-18", "2025-06-18"),
        ("2024-11-05", "2024-11-05"),
        ("2030-01-01", "2025-11-25"),
        ("x", "2025-11-25"),
    ],
)
def test_initialize_gets_the_version_asked_for_when_spoken_else_the_newest(
    requested: str, answered: str
) -> None:
    assert versions.negotiate(requested) == answered


@pytest.mark.parametrize(
    ("meta_version", "method", "header", "modern"),
    [
        (True, "tools/list", None, True),
        (True, "initialize", None, True),  # a modern request for a removed method
        (False, "initialize", "2026-07-28", False),  # the handshake starts a legacy session
        (False, "tools/list", "2026-07-28", True),
        (False, "tools/list", "2027-01-01", True),  # unknown but later: the modern era answers
        (False, "tools/list", "2025-11-25", False),
        (False, "tools/list", "2025-99-99", False),
        (False, "tools/list", None, False),
    ],
)
def test_the_era_of_a_request(meta_version: bool, method: str, header: str | None, modern: bool) -> None:
    assert versions.is_modern(meta_version, method, header) is modern


def test_validation_failures_are_protocol_errors_only_before_2025_11_25() -> None:
    assert [v for v in versions.ALL_VERSIONS if versions.validation_is_protocol_error(v)] == [
        "2025-06-18",
        "2025-03-26",
        "2024-11-05",
    ]


def test_log_levels_rank_from_debug_up_and_anything_else_is_no_level() -> None:
    assert [log_rank(level) for level in LOG_LEVELS] == list(range(8))
    assert log_rank("DEBUG") == log_rank(None) == log_rank(3) == -1


@pytest.mark.parametrize(
    ("params", "token"),
    [
        ({"_meta": {"progressToken": "p"}}, "p"),
        ({"_meta": {"progressToken": 7}}, 7),
        ({"_meta": {"progressToken": True}}, None),
        ({"_meta": {"progressToken": 1.5}}, None),
        ({"_meta": ["progressToken"]}, None),
        ({}, None),
    ],
)
def test_a_progress_token_is_a_string_or_an_integer(params: dict[str, object], token: object) -> None:
    assert progress_token(params) == token
