"""Legacy MCP sessions with an injected clock: idle expiry, the LRU cap, key binding, delete."""

from __future__ import annotations

import pytest

from appliance.rpc.sessions import SessionStore

KEY = "tsk_aaaaaaaa"
OTHER_KEY = "tsk_bbbbbbbb"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_a_new_session_keeps_its_version_and_client_info(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    opened = store.create(KEY, "2025-06-18", {"name": "c", "version": "1"})
    found = store.get(opened.id, KEY)
    assert found is opened
    assert (found.protocol_version, found.client_info) == ("2025-06-18", {"name": "c", "version": "1"})
    assert len(opened.id) >= 32 and all(0x21 <= ord(c) <= 0x7E for c in opened.id)
    assert store.create(KEY, "2025-06-18", {}).id != opened.id


def test_a_session_expires_after_the_ttl_of_idleness(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    opened = store.create(KEY, "2025-11-25", {})
    clock.now += 60
    assert store.get(opened.id, KEY) is opened  # exactly at the TTL it is still alive
    clock.now += 60.001
    assert store.get(opened.id, KEY) is None
    assert len(store) == 0
    clock.now -= 1000  # the clock going back does not resurrect it
    assert store.get(opened.id, KEY) is None


def test_use_keeps_a_session_alive_past_the_ttl(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    opened = store.create(KEY, "2025-11-25", {})
    for _ in range(5):
        clock.now += 45
        assert store.get(opened.id, KEY) is opened
    assert clock.now - 1000 > 60


def test_creating_a_session_sweeps_the_expired_ones(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    old = [store.create(KEY, "2025-11-25", {}) for _ in range(3)]
    clock.now += 61
    fresh = store.create(KEY, "2025-11-25", {})
    assert len(store) == 1
    assert all(store.get(s.id, KEY) is None for s in old)
    assert store.get(fresh.id, KEY) is fresh


def test_the_least_recently_used_session_is_dropped_beyond_the_cap(clock: Clock) -> None:
    store = SessionStore(ttl_s=600, max_sessions=3, clock=clock)
    a, b, c = (store.create(KEY, "2025-11-25", {}) for _ in range(3))
    clock.now += 1
    assert store.get(a.id, KEY) is a  # a is now the most recently used; b the least
    d = store.create(KEY, "2025-11-25", {})
    assert len(store) == 3
    assert store.get(b.id, KEY) is None
    assert {s.id for s in (a, c, d) if store.get(s.id, KEY) is s} == {a.id, c.id, d.id}


def test_a_session_is_invisible_to_another_key_prefix(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    opened = store.create(KEY, "2025-11-25", {})
    assert store.get(opened.id, OTHER_KEY) is None
    assert store.delete(opened.id, OTHER_KEY) is False
    # The foreign attempts neither ended nor touched it.
    assert store.get(opened.id, KEY) is opened
    assert store.get("no-such-session", KEY) is None


def test_a_foreign_lookup_does_not_refresh_a_session(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    opened = store.create(KEY, "2025-11-25", {})
    clock.now += 50
    assert store.get(opened.id, OTHER_KEY) is None
    clock.now += 20
    assert store.get(opened.id, KEY) is None


def test_delete_ends_a_session_once(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    opened = store.create(KEY, "2025-11-25", {})
    kept = store.create(KEY, "2025-11-25", {})
    assert store.delete(opened.id, KEY) is True
    assert store.get(opened.id, KEY) is None
    assert store.delete(opened.id, KEY) is False
    assert store.get(kept.id, KEY) is kept
    assert len(store) == 1


def test_an_expired_session_cannot_be_deleted(clock: Clock) -> None:
    store = SessionStore(ttl_s=60, max_sessions=10, clock=clock)
    opened = store.create(KEY, "2025-11-25", {})
    clock.now += 61
    assert store.delete(opened.id, KEY) is False
    assert len(store) == 0


def test_one_key_beyond_its_own_cap_drops_its_own_oldest_session_never_another_keys(clock: Clock) -> None:
    """RATE-05: a key flooding initialize pushes out only its own sessions."""
    store = SessionStore(ttl_s=60, max_sessions=100, clock=clock, per_key=3)
    theirs = store.create(OTHER_KEY, "2025-11-25", {})
    mine = [store.create(KEY, "2025-11-25", {}) for _ in range(3)]
    store.get(mine[0].id, KEY)  # used: now the second is this key's least recently used
    flood = [store.create(KEY, "2025-11-25", {}) for _ in range(50)]
    assert store.get(theirs.id, OTHER_KEY) is theirs
    assert [s.id for s in flood[-3:] if store.get(s.id, KEY) is s] == [s.id for s in flood[-3:]]
    assert store.get(mine[0].id, KEY) is None and store.get(mine[1].id, KEY) is None
    assert len(store) == 4
    store.delete(flood[-1].id, KEY)
    assert store.create(KEY, "2025-11-25", {}) and store.get(flood[-2].id, KEY) is not None
