"""Import drafts and form readers (gateway/admin/imports.py), without a runtime: a draft is
taken once and only by its holder, expires, and the drafts stay bounded per holder, in
count and in bytes; a .mcp.json entry becomes the connection the CLI and console import;
arguments and environments from text lines, refusals naming the field."""

from __future__ import annotations

import json

import pytest

from appliance.errors import ImportFailed, InvalidParams, NotFound
from appliance.gateway.admin import imports
from appliance.gateway.admin.imports import Draft, Drafts


def _draft(holder: str = "h1", data: bytes | None = None) -> Draft:
    return Draft(holder, "tsk_abc", "openapi", "kit", "default", source="s", data=data)


def test_a_draft_is_taken_once_and_only_by_its_holder() -> None:
    held = Drafts()
    key = held.put(_draft())
    with pytest.raises(NotFound) as other:
        held.take(key, "h2")
    assert other.value.field == "draft"
    assert held.take(key, "h1").slug == "kit"
    with pytest.raises(NotFound):
        held.take(key, "h1")
    held.give_back(key, _draft())  # a failed save leaves it to retry
    assert held.take(key, "h1").holder == "h1"


def test_a_draft_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    held = Drafts()
    key = held.put(_draft())
    later = imports.time.monotonic() + imports.DRAFT_TTL_S + 1
    monkeypatch.setattr(imports.time, "monotonic", lambda: later)
    with pytest.raises(NotFound):
        held.take(key, "h1")


def test_drafts_stay_bounded_per_holder_in_count_and_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    held = Drafts()
    keys = [held.put(_draft()) for _ in range(imports.PER_HOLDER_MAX + 2)]
    with pytest.raises(NotFound):
        held.take(keys[0], "h1")  # the oldest of that holder went
    assert held.take(keys[-1], "h1").holder == "h1"
    monkeypatch.setattr(imports, "DRAFT_BYTES_MAX", 10)
    first = held.put(_draft("a", b"123456"))
    second = held.put(_draft("b", b"123456"))
    with pytest.raises(NotFound):
        held.take(first, "a")  # evicted to make room
    assert held.take(second, "b").data == b"123456"


def test_holders_are_opaque_digests_of_the_session_token() -> None:
    token = "session-token-value"
    assert token not in imports.holder_of(token) and imports.holder_of(token) == imports.holder_of(token)
    assert imports.holder_of(token) != imports.holder_of(token + "x")


def test_a_mcp_json_entry_becomes_a_connection() -> None:
    doc = {"mcpServers": {"mem": {"command": "npx", "args": ["-y", "server-memory"], "env": {"A": 1}}}}
    assert imports.mcp_json_connection(json.dumps(doc).encode(), None) == {
        "transport": "stdio",
        "command": "npx",
        "args": ["-y", "server-memory"],
        "env": {"A": "1"},
    }
    remote = {
        "mcpServers": {
            "a": {"url": "https://x.example/sse"},
            "b": {"url": "https://y.example/mcp", "type": "http"},
        }
    }
    raw = json.dumps(remote).encode()
    assert imports.mcp_json_connection(raw, "a") == {"transport": "sse", "url": "https://x.example/sse"}
    assert imports.mcp_json_connection(raw, "b") == {"transport": "http", "url": "https://y.example/mcp"}


@pytest.mark.parametrize(
    ("raw", "server", "field"),
    [
        (b"[1", None, "mcp_json"),
        (b"{}", None, "mcp_json"),
        (b'{"mcpServers": {"a": {"command": "x"}, "b": {"command": "y"}}}', None, "server"),
        (b'{"mcpServers": {"a": {"command": "x"}}}', "nope", "server"),
        (b'{"mcpServers": {"a": {"args": []}}}', None, "mcp_json"),
        (b'{"mcpServers": {"a": {"command": "x", "args": "-y"}}}', None, "mcp_json"),
    ],
)
def test_a_bad_mcp_json_is_refused_naming_the_field(raw: bytes, server: str | None, field: str) -> None:
    with pytest.raises(ImportFailed) as refused:
        imports.mcp_json_connection(raw, server)
    assert refused.value.field == field


def test_arguments_and_environments_are_read_a_line_each() -> None:
    assert imports.lines(" -y \r\n\n server \n", "args") == ["-y", "server"]
    assert imports.env_lines("A=1\nB = two=2\n") == {"A": "1", "B": " two=2"}
    for text, field in (("\n".join(["x"] * (imports.ARGS_MAX + 1)), "args"), ("=1", "env"), ("A", "env")):
        with pytest.raises(InvalidParams) as refused:
            imports.env_lines(text) if field == "env" else imports.lines(text, field)
        assert refused.value.field == field
