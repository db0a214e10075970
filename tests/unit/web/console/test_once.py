"""The console's one-time form tokens: spent once, bounded in count and in age."""

from __future__ import annotations

import time

import pytest

from appliance.web.console.once import OnceTokens


def test_a_token_is_spent_once_and_an_unknown_one_never() -> None:
    store = OnceTokens()
    token = store.issue()
    assert len(token) == 32 and token != store.issue()
    assert store.spend(token) and not store.spend(token)
    assert not store.spend("") and not store.spend("0" * 32)


def test_the_store_keeps_the_newest_forms_within_its_limit() -> None:
    store = OnceTokens(limit=3)
    tokens = [store.issue() for _ in range(5)]
    assert [store.spend(t) for t in tokens] == [False, False, True, True, True]


def test_a_form_older_than_its_age_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    store = OnceTokens(ttl_s=60)
    old = store.issue()
    now[0] += 30
    fresh = store.issue()
    now[0] += 31  # old is 61 s old, fresh 31 s
    assert not store.spend(old) and store.spend(fresh)
