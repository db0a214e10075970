"""Legacy (2025) MCP sessions: negotiated version and client info, nothing about identity.

A session id only says which handshake a request belongs to. Who is calling always comes
from the request's own credential, checked on every request; a session is bound to the
key that opened it, so a stolen session id is useless without that key (and answers 404,
exactly like an unknown id).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Session:
    id: str
    key_prefix: str
    protocol_version: str
    client_info: dict[str, Any]
    scope: str = ""  # "" for the bridge, "<project>.<slug>" for /mcp/<slug>
    initialized: bool = False
    last_seen: float = field(default_factory=time.monotonic)
    # The least severe relayed notifications/message: "debug" (all) until logging/setLevel.
    log_level: str = "debug"
    # Requests still running, by JSON-RPC id, so that notifications/cancelled can stop one.
    in_flight: dict[Any, asyncio.Task[Any]] = field(default_factory=dict)

    def set_log_level(self, level: str) -> None:
        self.log_level = level

    def cancel(self, request_id: Any) -> None:
        """Stop the request ``request_id`` if it still runs (unknown ids are ignored)."""
        if type(request_id) in (str, int):  # only a valid id names a request
            task = self.in_flight.get(request_id)
            if task is not None:
                task.cancel()


class SessionStore:
    def __init__(
        self,
        ttl_s: float,
        max_sessions: int,
        clock: Callable[[], float] = time.monotonic,
        *,
        per_key: int = 0,
    ):
        self._ttl = ttl_s
        self._max = max_sessions
        # One key's flood of initialize must not push out everyone else's sessions (RATE-05):
        # beyond ``per_key`` (0: no cap), a key's own least recently used session goes.
        self._per_key = per_key
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._held: Counter[str] = Counter()  # sessions per key prefix

    def create(
        self, key_prefix: str, protocol_version: str, client_info: dict[str, Any], scope: str = ""
    ) -> Session:
        self._expire()
        # 32 random bytes, url-safe: visible ASCII as the transport requires, unguessable.
        session = Session(
            secrets.token_urlsafe(32),
            key_prefix,
            protocol_version,
            client_info,
            scope,
            last_seen=self._clock(),
        )
        if self._per_key and self._held[key_prefix] >= self._per_key:
            oldest = next(sid for sid, held in self._sessions.items() if held.key_prefix == key_prefix)
            self._drop(oldest)
        self._sessions[session.id] = session
        self._held[key_prefix] += 1
        while len(self._sessions) > self._max:
            self._drop(next(iter(self._sessions)))
        return session

    def get(self, session_id: str, key_prefix: str, scope: str = "") -> Session | None:
        session = self._sessions.get(session_id)
        # A session belongs to one key and one endpoint; anything else looks like no session.
        if session is None or session.key_prefix != key_prefix or session.scope != scope:
            return None
        now = self._clock()
        if now - session.last_seen > self._ttl:
            self._drop(session_id)
            return None
        session.last_seen = now
        self._sessions.move_to_end(session_id)
        return session

    def delete(self, session_id: str, key_prefix: str, scope: str = "") -> bool:
        if self.get(session_id, key_prefix, scope) is None:
            return False
        self._drop(session_id)
        return True

    def _drop(self, session_id: str) -> None:
        session = self._sessions.pop(session_id)
        self._held[session.key_prefix] -= 1
        if not self._held[session.key_prefix]:
            del self._held[session.key_prefix]

    def _expire(self) -> None:
        now = self._clock()
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if now - oldest.last_seen <= self._ttl:
                break
            self._drop(oldest.id)

    def __len__(self) -> int:
        return len(self._sessions)
