"""Who is calling: the principal behind an API key, for every face.

The faces (``web/``: HTTP, legacy SSE, stdio) never read the access room themselves; they
hand the key they were given to this one function.
"""

from __future__ import annotations

from appliance.access import keys
from appliance.gateway.runtime import Runtime
from appliance.models import Principal


async def authenticate(rt: Runtime, key: str, *, fresh: bool = False) -> Principal:
    """The principal behind ``key``, or ``Unauthorized`` (one text for every failure).

    Remembered until the database changes (``Database.memo``), so a revocation counts from
    the next request; ``fresh`` reads the key's row every time (``toolspoke stdio``, one
    caller per process, always has).
    """
    if fresh:
        async with rt.db.read() as conn:
            return await keys.authenticate(conn, key)
    return await keys.authenticate_cached(rt.db, key)


async def still_live(rt: Runtime, principal: Principal) -> None:
    """``principal``'s key is still neither revoked nor expired (``Unauthorized`` or
    ``KeyExpired`` otherwise): for a call that waited on a person, whose key may have been
    revoked meanwhile. The operator and the anonymous caller hold no key."""
    if principal.operator or principal.anonymous:
        return
    async with rt.db.read() as conn:
        await keys.still_live(conn, principal.key_prefix)
