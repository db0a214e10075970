"""Redaction of every credential in the vault, wherever upstream text comes back.

An upstream may echo any secret it was ever sent, and one toolkit's upstream may well know
another toolkit's credential (the same token used twice, a shared service). So whatever an
upstream says (call results and their relays, import and sync errors, dry-run listings,
health reasons, log lines, error data) is redacted against *every* stored credential, not
only the toolkit's own (issue 16 item 3).

The needles (``secret.Needles``: every encoded form, compiled into one Aho-Corasick
automaton) are built once and shared. They are refreshed through the database memo, which
moves on any commit but call records: only then are the ``secrets`` rows read again, only
a row whose sealed blob changed is opened again, and the automaton is rebuilt only when
the set of values changed (a rotation re-seals the same values: no rebuild). A call costs
one dict lookup for them, no vault read.

The same needles are published process-wide (``secret.publish``) for the log record
factory, so a log line from any module is redacted too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from appliance import secret
from appliance.db import ReadConn
from appliance.errors import ApplianceError
from appliance.secret import Needles, Redactor
from appliance.vault import connections as vault_conns
from appliance.vault import store as vault_store
from appliance.vault.crypto import SealError

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime

log = logging.getLogger(__name__)

_MEMO_KEY = ("vault_needles",)
# Above this many secrets the automaton is built in a thread (~0.2 ms per secret), so a
# large vault's rebuild does not hold the event loop in one piece.
_BUILD_IN_THREAD = 50


class VaultNeedles:
    """This process's view of the vault's secrets: per row, the blob and the values it opened to."""

    def __init__(self) -> None:
        # by toolkit id (its shared credential) or ("user", toolkit id, user id) (a person's own)
        self._rows: dict[Any, tuple[bytes, tuple[str, ...]]] = {}
        self._values: frozenset[str] = frozenset()
        self.needles: Needles = secret.NO_NEEDLES
        self._lock = asyncio.Lock()
        self.loads = 0  # times the secrets rows were read (the memo moved)
        self.builds = 0  # times the automaton was rebuilt (the values changed)

    async def load(self, rt: Runtime, conn: ReadConn) -> Needles:
        async with self._lock:
            self.loads += 1
            kept: dict[Any, tuple[bytes, tuple[str, ...]]] = {}
            for stored in await vault_store.every_stored(conn):
                held = self._rows.get(stored.toolkit_id)
                if held is not None and held[0] == stored.blob:
                    kept[stored.toolkit_id] = held
                    continue
                kept[stored.toolkit_id] = (stored.blob, await _values(rt, conn, stored))
            # Each person's own connection (issue 19): their tokens, keys and refresh tokens.
            for own in await vault_conns.every_stored(conn):
                key = ("user", own.toolkit_id, own.user_id)
                held = self._rows.get(key)
                if held is not None and held[0] == own.blob:
                    kept[key] = held
                    continue
                kept[key] = (own.blob, await _own_values(rt, conn, own))
            self._rows = kept
            values = frozenset(v for _, vs in kept.values() for v in vs)
            if values != self._values:
                self.needles = await _build(values)
                self._values = values
                self.builds += 1
            secret.publish(self.needles)
            return self.needles


async def _values(rt: Runtime, conn: ReadConn, stored: vault_store.StoredSecret) -> tuple[str, ...]:
    """What an upstream could echo of one stored credential (``UpstreamAuth.secrets``)."""
    from appliance.gateway.credentials import to_auth  # credentials uses this module

    try:
        fields = await vault_store.open_secret(conn, rt.vault, stored)
    except SealError:
        return ()  # never sent while it does not open; the call path says why
    return tuple(to_auth(stored.scheme, stored.settings, fields).secrets())


async def _own_values(rt: Runtime, conn: ReadConn, own: vault_conns.StoredConnection) -> tuple[str, ...]:
    """What an upstream could echo of one person's connection: every secret field, and the
    Basic pair's derived form."""
    from appliance.gateway.credentials import to_auth

    try:
        fields = await vault_conns.open_connection(conn, rt.vault, own)
    except SealError:
        return ()
    if own.scheme == "oauth":
        return tuple(v for v in fields.values() if v)
    return tuple(to_auth(own.scheme, own.settings, fields).secrets())


async def _build(values: frozenset[str]) -> Needles:
    if len(values) > _BUILD_IN_THREAD:
        return await asyncio.to_thread(Needles, values)
    return Needles(values)


async def needles(rt: Runtime) -> Needles:
    """The vault's needles as of the database's current state (usually a memo hit)."""
    state = rt.redaction
    return await rt.db.cached(_MEMO_KEY, lambda conn: state.load(rt, conn))


async def redactor(rt: Runtime, extra: Iterable[str] = ()) -> Redactor:
    """A fresh ``Redactor`` (own ``hits``) for every vault secret plus ``extra`` values
    (an OAuth access token a call used, which is not in the vault)."""
    return Redactor(extra, needles=(await needles(rt),))


async def text(rt: Runtime, value: str) -> str:
    """``value`` with every form of every vault secret replaced: the one-line helper."""
    return (await redactor(rt)).text(value)


def scrub(error: ApplianceError, red: Redactor) -> ApplianceError:
    """``error`` with its public message and data redacted in place (and its chained causes'
    messages, which a traceback in a log would print); returned for ``raise``."""
    message = red.text(error.public_message)
    if message != error.public_message:
        error.public_message = message
        error.args = (message,)
    error.data = red.value(error.data)
    if error.field is not None:
        error.field = red.text(error.field)
    seen: set[int] = {id(error)}
    cause: BaseException | None = error.__cause__ or error.__context__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ApplianceError):
            cause.public_message = red.text(cause.public_message)
            cause.data = red.value(cause.data)
        with contextlib.suppress(Exception):  # an exception class with unusual args
            cause.args = tuple(red.value(a) if isinstance(a, str) else a for a in cause.args)
        cause = cause.__cause__ or cause.__context__
    return error


@contextlib.asynccontextmanager
async def redacting(rt: Runtime, extra: Iterable[str] = ()) -> AsyncIterator[Redactor]:
    """Around work that carries upstream text out (an import, a sync): an ``ApplianceError``
    leaving the block has every vault secret (and ``extra``) redacted from it. The redactor
    is yielded for the block's own results."""
    red = await redactor(rt, extra)
    try:
        yield red
    except ApplianceError as exc:
        scrub(exc, red)
        raise
