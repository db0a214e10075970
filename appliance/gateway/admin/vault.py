"""The vault's keys: status, rotate, retire a data key version, rekey the master key (admins).

Key material never leaves: ``status`` reports versions, states and how many secrets each
still seals; the other operations report counts. Rotation and rekeying are safe while
serving (the vault re-seals in batches; a serving appliance picks a new master key up the
next time it needs it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appliance.access import principals
from appliance.errors import InvalidParams
from appliance.models import Principal
from appliance.vault import store
from appliance.vault.keyring import rekey_file

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime

BATCH_MAX = 100_000


async def status(rt: Runtime, actor: Principal) -> list[dict[str, Any]]:
    """Every key version: whether it is live or when it was retired, and how many secrets it seals."""
    principals.require_admin(actor)
    async with rt.db.read() as conn:
        return await store.status(conn)


async def rotate(rt: Runtime, actor: Principal, *, batch: int = 500) -> dict[str, int]:
    """A new primary key version; every secret re-sealed under it, ``batch`` per transaction."""
    principals.require_admin(actor)
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= BATCH_MAX:
        raise InvalidParams(f"'batch' must be a whole number from 1 to {BATCH_MAX}", field="batch")
    return await store.rotate(rt.db, rt.vault, batch=batch)


async def retire(rt: Runtime, actor: Principal, version: int) -> dict[str, Any]:
    """Destroy a key version no secret uses any more (old backups then cannot be opened with it)."""
    principals.require_admin(actor)
    return await store.retire(rt.db, rt.vault, version)


async def rekey(rt: Runtime, actor: Principal) -> dict[str, int | str]:
    """A new random master key file; the data keys re-sealed under it."""
    principals.require_admin(actor)
    return await rekey_file(rt.db, rt.vault, rt.settings)
