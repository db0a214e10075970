"""The master key and the versioned data keys it wraps.

Envelope encryption, after HashiCorp Vault Transit (anchor A12): secrets are sealed under a
random *data key* of some version; each data key is stored in ``vault_keys`` sealed under
the *master key* (the 0600 file in the data dir, or ``TOOLSPOKE_MASTER_KEY``). Rotation adds
a version and re-seals every secret under it; retiring a version destroys its wrapped key,
so even a backup taken before the rotation no longer opens with the master key alone.

Start-up rule: when the vault holds keys, the master key must open every live one. A
missing, malformed or wrong key is a ``ConfigError`` (the CLI exits 2) and nothing is
written; a new key file is created only while the vault is empty.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

from appliance.config import Settings
from appliance.db import Database, ReadConn, WriteTx
from appliance.errors import ConfigError
from appliance.vault.crypto import Sealer, SealError, blob_version, context, new_key, parse_master_key

log = logging.getLogger(__name__)

# The master key seals data keys only; this label is its blob header, not a rotation number.
_KEK_LABEL = 1


def read_master_key(settings: Settings) -> tuple[bytes | None, str]:
    """The master key and where it came from; (None, where) when there is none."""
    if settings.master_key is not None:
        try:
            return parse_master_key(settings.master_key.reveal()), "TOOLSPOKE_MASTER_KEY"
        except ValueError:
            raise ConfigError(
                "TOOLSPOKE_MASTER_KEY is malformed (expected 64 hex characters)", field="master_key"
            ) from None
    path = settings.master_key_path
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None, str(path)
    except OSError as exc:
        raise ConfigError(f"cannot read master key file {path}: {exc.strerror}") from None
    try:
        key = parse_master_key(text)
    except ValueError:
        raise ConfigError(f"master key file {path} is malformed (expected 64 hex characters)") from None
    if path.stat().st_mode & 0o077:
        log.warning("master key file %s is readable by others; chmod 600 it", path)
    return key, str(path)


def _pending_hint(settings: Settings) -> str:
    pending = settings.master_key_path.with_name(settings.master_key_path.name + ".new")
    if settings.master_key is None and pending.exists():
        return f" A rekey was interrupted: {pending} may hold the key that opens it."
    return ""


def _create_key_file(path: Path) -> bytes:
    key = new_key()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key.hex() + "\n")
        # On disk before anything is sealed under it: after a power cut, data keys committed
        # with synchronous=FULL and an empty key file would lock every credential away (CRASH-02).
        fh.flush()
        os.fsync(fh.fileno())
    _sync_dir(path.parent)
    return key


def _sync_dir(directory: Path) -> None:
    """Make a file's creation or rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def at_stake(sealed: dict[int, int], versions: Iterable[int]) -> str:
    """How many stored credentials the data keys ``versions`` seal (from ``sealed``: version
    -> credentials, counted from the rows' plain ``key_version``: no key needed), as a sentence
    for an operator deciding what to do about a key that does not open them."""
    shut = sorted(set(versions))
    count = sum(sealed.get(v, 0) for v in shut)
    total = sum(sealed.values())
    named = ", ".join(str(v) for v in shut)
    noun = "credential" if count == 1 else "credentials"
    return (
        f" {count} stored {noun} (of {total}) {'is' if count == 1 else 'are'} sealed under the data "
        f"key{'s' if len(shut) != 1 else ''} it cannot open (version{'s' if len(shut) != 1 else ''} {named})."
    )


async def sealed_counts(conn: ReadConn) -> dict[int, int]:
    """Stored credentials per data key version; read without any key."""
    rows = await conn.all("SELECT key_version AS v, COUNT(*) AS n FROM secrets GROUP BY key_version")
    return {int(r["v"]): int(r["n"]) for r in rows}


def _unopened(kek: Sealer, wrapped: Iterable[tuple[int, bytes]]) -> list[int]:
    """The versions whose wrapped data key ``kek`` does not open (every one is tried)."""
    shut = []
    for version, blob in wrapped:
        try:
            kek.open(blob, context("vault_keys", version, "key"))
        except SealError:
            shut.append(version)
    return shut


def check_opens(
    settings: Settings, wrapped: list[tuple[int, bytes]], sealed: dict[int, int] | None = None
) -> None:
    """ConfigError unless the configured master key opens every ``(version, wrapped)`` data key.

    For a database that is not open yet (a backup about to be restored): the start-up rule
    without its side effect, since no key file is ever created here. ``sealed`` (version ->
    stored credentials) lets the message say how many credentials are at stake.
    """
    if not wrapped:
        return
    counts = sealed or {}
    master, where = read_master_key(settings)
    if master is None:
        raise ConfigError(
            f"the backup's vault holds secrets but there is no master key ({where} is missing and "
            "TOOLSPOKE_MASTER_KEY is not set); put the key that was in use when the backup was "
            "taken in place first. Nothing was changed." + at_stake(counts, [v for v, _ in wrapped]),
            field="master_key",
            data={"sealed": sum(counts.values())},
        )
    shut = _unopened(Sealer(master, _KEK_LABEL), wrapped)
    if shut:
        raise ConfigError(
            f"the master key from {where} does not open the backup's vault (data key version "
            f"{shut[0]}); use the key that was in use when the backup was taken. Nothing was changed."
            + at_stake(counts, shut),
            field="master_key",
            data={"sealed": sum(counts.get(v, 0) for v in shut), "versions": shut},
        )


class Vault:
    """Seals and opens secrets; holds the master key and the data keys it has opened."""

    def __init__(self, master: bytes, settings: Settings | None = None) -> None:
        self._kek = Sealer(master, _KEK_LABEL)
        self._keys: dict[int, Sealer] = {}
        self._settings = settings  # to re-read the key after `vault rekey` in another process

    def __repr__(self) -> str:
        return f"Vault(versions={sorted(self._keys)})"

    @classmethod
    async def open(cls, db: Database, settings: Settings) -> Vault:
        """The vault of an open database, its master key checked against every live key."""
        master, where = read_master_key(settings)
        async with db.read() as conn:
            rows = await conn.all("SELECT version, wrapped FROM vault_keys WHERE wrapped IS NOT NULL")
            # Counted from the rows' plain key_version: what is at stake is known without a key.
            sealed = await sealed_counts(conn) if rows else {}
        wrapped = [(int(r["version"]), bytes(r["wrapped"])) for r in rows]
        if master is None:
            if rows:
                raise ConfigError(
                    f"the vault holds secrets but there is no master key ({where} is missing and "
                    "TOOLSPOKE_MASTER_KEY is not set); restore the key file, or set the variable. "
                    "No new key was created, because it could not open the stored secrets."
                    + at_stake(sealed, [v for v, _ in wrapped]),
                    data={"sealed": sum(sealed.values())},
                )
            master = _create_key_file(settings.master_key_path)
        vault = cls(master, settings)
        shut = _unopened(vault._kek, wrapped)
        if shut:
            raise ConfigError(
                f"the master key from {where} does not open this vault (data key version "
                f"{shut[0]}); it is the wrong key. Nothing was changed."
                + at_stake(sealed, shut)
                + _pending_hint(settings),
                data={"sealed": sum(sealed.get(v, 0) for v in shut), "versions": shut},
            )
        for version, blob in wrapped:
            vault._unwrap(version, blob)
        return vault

    def _unwrap(self, version: int, wrapped: bytes) -> Sealer:
        ctx = context("vault_keys", version, "key")
        try:
            key = self._kek.open(wrapped, ctx)
        except SealError:
            # `vault rekey` may have replaced the master key since this process started:
            # the data keys it already opened stay usable, a newer one needs the new key.
            if self._settings is None:
                raise
            try:
                current, _ = read_master_key(self._settings)
            except ConfigError:
                current = None
            if current is None:
                raise
            kek = Sealer(current, _KEK_LABEL)
            key = kek.open(wrapped, ctx)
            self._kek = kek
        sealer = Sealer(key, version)
        self._keys[version] = sealer
        return sealer

    async def _sealer(self, conn: ReadConn, version: int) -> Sealer:
        held = self._keys.get(version)
        if held is not None:
            return held
        # A version another process added (``vault rotate`` beside a serving appliance).
        row = await conn.one("SELECT wrapped FROM vault_keys WHERE version = ?", (version,))
        if row is None or row["wrapped"] is None:
            raise SealError(f"key version {version} is unknown or retired")
        return self._unwrap(version, bytes(row["wrapped"]))

    async def primary(self, tx: WriteTx) -> Sealer:
        """The newest live data key; the first one is made on the first seal."""
        row = await tx.one("SELECT MAX(version) AS v FROM vault_keys WHERE wrapped IS NOT NULL")
        if row is None or row["v"] is None:
            return await self.add_version(tx)
        return await self._sealer(tx, int(row["v"]))

    async def add_version(self, tx: WriteTx) -> Sealer:
        """A new data key version, newer than any ever made (retired ones included)."""
        row = await tx.one("SELECT COALESCE(MAX(version), 0) + 1 AS v FROM vault_keys")
        version = int(row["v"])
        key = new_key()
        wrapped = self._kek.seal(key, context("vault_keys", version, "key"))
        await tx.run("INSERT INTO vault_keys (version, wrapped) VALUES (?, ?)", (version, wrapped))
        sealer = Sealer(key, version)
        self._keys[version] = sealer
        return sealer

    async def seal(self, tx: WriteTx, plaintext: bytes, ctx: bytes) -> tuple[int, bytes]:
        sealer = await self.primary(tx)
        return sealer.version, sealer.seal(plaintext, ctx)

    async def open_blob(self, conn: ReadConn, blob: bytes, ctx: bytes) -> bytes:
        """The plaintext of ``blob`` bound to ``ctx``; SealError when it does not open."""
        sealer = await self._sealer(conn, blob_version(bytes(blob)))
        return sealer.open(bytes(blob), ctx)

    def forget(self, version: int) -> None:
        self._keys.pop(version, None)

    async def rekey(self, tx: WriteTx, master: bytes) -> int:
        """Re-seal every live data key under a new master key, in the caller's transaction.

        The secrets themselves are untouched (they are sealed under the data keys). Returns
        how many data keys were re-sealed; the caller stores the new key once this commits.
        """
        new = Sealer(master, _KEK_LABEL)
        rows = await tx.all("SELECT version, wrapped FROM vault_keys WHERE wrapped IS NOT NULL")
        for row in rows:
            version = int(row["version"])
            ctx = context("vault_keys", version, "key")
            key = self._kek.open(bytes(row["wrapped"]), ctx)
            await tx.run("UPDATE vault_keys SET wrapped = ? WHERE version = ?", (new.seal(key, ctx), version))
        self._kek = new
        return len(rows)


async def rekey_file(db: Database, vault: Vault, settings: Settings) -> dict[str, int | str]:
    """Replace the master key file with a new random key, re-sealing the data keys under it.

    Crash-safe order: the new key is written beside the old one (``master.key.new``, 0600)
    before the database changes, and renamed over it after the commit. A crash in between
    leaves both files; start-up then names the one that opens the vault.
    """
    if settings.master_key is not None:
        raise ConfigError(
            "the master key comes from TOOLSPOKE_MASTER_KEY; rekey replaces the key file, so unset "
            "the variable (and keep its value) first",
            field="master_key",
        )
    path = settings.master_key_path
    pending = path.with_name(path.name + ".new")
    pending.unlink(missing_ok=True)
    key = _create_key_file(pending)
    try:
        async with db.write() as tx:
            count = await vault.rekey(tx, key)
    except BaseException:
        pending.unlink(missing_ok=True)
        raise
    os.replace(pending, path)
    _sync_dir(path.parent)
    return {"data_keys": count, "key_file": str(path)}
