"""One-time tokens for the console's forms whose answer may be shown only once.

A new key is shown in the answer to the POST that made it, and never again. A browser that
reloads that answer sends the POST again (its CSRF token is still good), which would make a
second key the person never sees. The form therefore carries a token of its own, issued when
the page was rendered and spent by the first POST; a POST with a spent, expired or unknown
token changes nothing and is sent back to the page.

The tokens live in the serving process only: a restart forgets them, which refuses an old form
(safe) rather than honouring it twice. The store is bounded in count and age, so a client that
renders pages without end cannot grow it.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict

LIMIT = 4096  # issued and not yet spent, across every session of this process
TTL_S = 3600.0  # a form left open longer than an hour is refused and shown afresh


class OnceTokens:
    """Issue a token per rendered form; ``spend`` is true the first time only."""

    def __init__(self, *, limit: int = LIMIT, ttl_s: float = TTL_S) -> None:
        self._issued: OrderedDict[str, float] = OrderedDict()
        self._limit = limit
        self._ttl_s = ttl_s

    def issue(self) -> str:
        now = time.monotonic()
        self._expire(now)
        token = secrets.token_hex(16)
        self._issued[token] = now
        while len(self._issued) > self._limit:
            self._issued.popitem(last=False)  # the oldest form goes first
        return token

    def spend(self, token: str) -> bool:
        """True if ``token`` was issued here, is fresh and has not been spent; it is spent now."""
        self._expire(time.monotonic())
        return self._issued.pop(token, None) is not None

    def _expire(self, now: float) -> None:
        while self._issued:
            oldest, issued_at = next(iter(self._issued.items()))
            if now - issued_at <= self._ttl_s:
                return
            del self._issued[oldest]


def tokens(ctx: object) -> OnceTokens:
    """The app's store, made on first use (the console's pages share one per process)."""
    store = getattr(ctx, "console_once", None)
    if store is None:
        store = OnceTokens()
        setattr(ctx, "console_once", store)  # noqa: B010 (sanic's ctx is a plain namespace)
    return store
