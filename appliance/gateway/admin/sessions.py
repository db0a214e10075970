"""Console sessions as the console face uses them: sign in, resume, sign out, CSRF tokens.

Signing in takes a user's API key (never an agent's: an agent acts through MCP, it manages
nothing) and opens a session that acts through that key (``access/sessions.py``). Resuming
reads the session fresh on every request, so a revoked key, an ended session or a clock
run out counts at once; it is renewed at most once a minute while used, not on every page.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING

from appliance.access import sessions
from appliance.db import SyncWriter
from appliance.errors import Forbidden
from appliance.gateway import auth
from appliance.models import Principal

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime


def lifetimes(rt: Runtime) -> sessions.Lifetimes:
    settings = rt.settings
    return sessions.Lifetimes(
        idle_s=settings.console_idle_minutes * 60, absolute_s=settings.console_session_hours * 3600
    )


async def sign_in(rt: Runtime, key: str, *, now: float | None = None) -> tuple[str, Principal]:
    """A new session for ``key``'s user: its token (for the cookie) and who it acts for."""
    principal = await auth.authenticate(rt, key.strip(), fresh=True)
    if principal.agent_id is not None:
        raise Forbidden("an agent's key cannot sign in to the console; use your own key", field="key")
    at = time.time() if now is None else now
    limits = lifetimes(rt)

    def open_one(w: SyncWriter) -> str:
        sessions.prune_in(w, at, limits)  # the ended ones go whenever someone signs in
        return sessions.open_in(w, principal.key_prefix, at)

    return await rt.db.writing(open_one), principal


async def resume(rt: Runtime, token: str, *, now: float | None = None) -> Principal:
    """Who the session behind ``token`` acts for, or ``Unauthorized``; renews it when due."""
    at = time.time() if now is None else now
    found = await rt.db.reading(lambda r: sessions.find_in(r, token, at, lifetimes(rt)))
    if found.stale:
        await rt.db.writing(lambda w: sessions.renew_in(w, found.session_id, at))
    return found.principal


async def sign_out(rt: Runtime, token: str) -> None:
    """End the session behind ``token``; an unknown or ended one is already out."""
    if token and len(token) <= sessions.TOKEN_MAX:
        await rt.db.writing(lambda w: sessions.close_in(w, token))


def csrf_token(token: str) -> str:
    """The CSRF token every form of this session carries."""
    return sessions.csrf_token(token)


def csrf_matches(token: str, given: str) -> bool:
    """Whether a form's CSRF token is this session's (compared in constant time)."""
    return bool(given) and sessions.csrf_matches(token, given)


def binding(token: str) -> str | None:
    """What an OAuth authorization started in this session is bound to (its callback must
    come back in the same session): a hash of the token unlike the one stored for the
    session itself. None without a session."""
    if not token:
        return None
    return hashlib.sha256(b"toolspoke oauth state binding\x00" + token.encode()).hexdigest()
