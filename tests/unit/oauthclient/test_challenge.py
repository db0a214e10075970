"""``WWW-Authenticate`` is read strictly: what a server may send is understood, the rest ignored."""

from __future__ import annotations

from appliance.oauthclient.challenge import MAX_HEADER, bearer, parse, scopes_of


def test_the_specifications_examples_are_read() -> None:
    found = bearer(
        'Bearer error="insufficient_scope", scope="files:read files:write", '
        'resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource", '
        'error_description="File write permission required"'
    )
    assert found is not None
    assert found.error == "insufficient_scope"
    assert found.scopes == ("files:read", "files:write")
    assert found.resource_metadata == "https://mcp.example.com/.well-known/oauth-protected-resource"


def test_bearer_is_found_among_other_challenges_and_token_values() -> None:
    header = 'Basic realm="x", Bearer resource_metadata="https://a.test/prm", scope=read'
    found = bearer(header)
    assert found is not None and found.resource_metadata == "https://a.test/prm" and found.scopes == ("read",)
    assert [c.scheme for c in parse(header)] == ["basic", "bearer"]
    assert bearer("Bearer") is not None and bearer("Bearer").params == {}  # type: ignore[union-attr]
    assert bearer('Bearer realm="a\\"b"').params == {"realm": 'a"b'}  # type: ignore[union-attr]


def test_a_malformed_or_oversized_header_is_no_challenge() -> None:
    assert bearer(None) is None
    assert bearer('Bearer scope="unterminated') is None
    assert bearer('Bearer scope="a", scope="b"') is None  # a parameter twice: ambiguous
    assert bearer('Bearer resource_metadata="' + "a" * MAX_HEADER + '"') is None


def test_scope_tokens_are_deduplicated_and_malformed_ones_dropped() -> None:
    assert scopes_of("a b  a c\\d") == ("a", "b")
    assert scopes_of("") == ()
