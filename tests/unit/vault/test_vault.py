"""The vault in-process: AEAD blobs, the Secret wrapper, the keyring's start-up rule, rotation."""

from __future__ import annotations

import asyncio
import logging
import os
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance import config
from appliance.db import Database
from appliance.db.migrate import default_migrations_dir
from appliance.errors import ConfigError, Conflict
from appliance.secret import Secret
from appliance.vault import store
from appliance.vault.crypto import Sealer, SealError, blob_version, context, new_key, parse_master_key
from appliance.vault.keyring import Vault, check_opens

T = TypeVar("T")
CTX = context("secrets", 7, "credential")


# -- crypto ---------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(plaintext=st.binary(max_size=2048), row=st.integers(1, 2**40), field=st.text(max_size=20))
def test_any_plaintext_seals_and_opens_back_to_itself_in_its_own_context(
    plaintext: bytes, row: int, field: str
) -> None:
    sealer = Sealer(new_key(), 3)
    ctx = context("secrets", row, field)
    blob = sealer.seal(plaintext, ctx)
    assert blob_version(blob) == 3
    assert sealer.open(blob, ctx) == plaintext
    if len(plaintext) >= 16:  # long enough that an accidental match is impossible
        assert plaintext not in blob


def test_a_blob_copied_to_another_row_or_field_does_not_open() -> None:
    """VAULT-03: a ciphertext copied to another row or field fails closed (associated data)."""
    sealer = Sealer(new_key(), 1)
    blob = sealer.seal(b"CANARY-secret", CTX)
    with pytest.raises(SealError):
        sealer.open(blob, context("secrets", 8, "credential"))
    with pytest.raises(SealError):
        sealer.open(blob, context("secrets", 7, "other"))
    with pytest.raises(SealError):
        sealer.open(blob, context("vault_keys", 7, "credential"))


def test_every_single_bit_flip_truncation_or_relabelled_version_fails_closed() -> None:
    """VAULT-03: any bit flip, truncation, empty blob or unknown version fails closed."""
    sealer = Sealer(new_key(), 1)
    blob = sealer.seal(b"CANARY-0123456789", CTX)
    for i in range(len(blob)):
        for bit in (0, 7):
            tampered = bytearray(blob)
            tampered[i] ^= 1 << bit
            with pytest.raises(SealError):
                sealer.open(bytes(tampered), CTX)
    for cut in (0, 1, 5, 17, len(blob) - 1):
        with pytest.raises(SealError):
            sealer.open(blob[:cut], CTX)
    other = Sealer(new_key(), 2)
    relabelled = blob[:1] + (2).to_bytes(4, "big") + blob[5:]
    with pytest.raises(SealError):
        other.open(relabelled, CTX)
    with pytest.raises(SealError):
        Sealer(new_key(), 1).open(blob, CTX)  # same version number, wrong key


def test_equal_plaintexts_give_different_blobs_with_unique_random_nonces() -> None:
    """VAULT-05: equal plaintexts give different blobs under unique random nonces."""
    sealer = Sealer(new_key(), 1)
    blobs = [sealer.seal(b"same", CTX) for _ in range(20000)]
    nonces = {b[5:17] for b in blobs}
    assert len(nonces) == len(blobs)
    assert len(set(blobs)) == len(blobs)


def test_a_master_key_must_be_64_hex_characters() -> None:
    """VAULT-05: the master key is 256-bit (64 hex characters)."""
    assert len(parse_master_key("ab" * 32 + "\n")) == 32
    for bad in ("", "ab" * 31, "zz" * 32, "ab" * 33):
        with pytest.raises(ValueError):
            parse_master_key(bad)


# -- Secret -----------------------------------------------------------------------------------


def test_a_secret_never_shows_its_value_in_repr_str_format_logs_or_tracebacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """VAULT-01 / I-4 / I-7: a secret never prints in repr, str, format, logs or tracebacks."""
    secret = Secret("CANARY-abcdef")
    shown = [
        repr(secret),
        str(secret),
        f"{secret}",
        f"{secret!r}",
        f"{secret:>30}",
        "%s %r" % (secret, secret),  # noqa: UP031 - the old spelling must be safe too
        repr([secret]),
    ]
    assert all("CANARY" not in s for s in shown)
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("token %s %r", secret, {"t": secret})
    assert "CANARY" not in caplog.text

    def fails(token: Secret) -> None:
        raise ValueError(f"bad token {token}")

    try:
        fails(secret)
    except ValueError:
        text = traceback.format_exc()
    assert "CANARY" not in text
    assert secret.reveal() == "CANARY-abcdef"
    assert secret == Secret("CANARY-abcdef") and secret != Secret("other")
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(secret)


def test_the_master_key_setting_is_wrapped_so_settings_never_print_it(tmp_path: Path) -> None:
    s = config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path), "TOOLSPOKE_MASTER_KEY": "ab" * 32})
    assert s.master_key is not None and s.master_key.reveal() == "ab" * 32
    assert "abab" not in repr(s)


# -- keyring ---------------------------------------------------------------------------------


def _settings(tmp_path: Path, **env: str) -> config.Settings:
    return config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path), **env})


def run(body: Callable[[Database], Awaitable[T]], path: Path) -> T:
    async def main() -> T:
        db = Database(path / "toolspoke.db")
        await db.open(default_migrations_dir())
        try:
            return await body(db)
        finally:
            await db.close()

    return asyncio.run(asyncio.wait_for(main(), timeout=60))


async def _toolkits(db: Database, n: int) -> list[int]:
    async with db.write() as tx:
        ids = []
        for i in range(n):
            ids.append(
                await tx.run(
                    "INSERT INTO toolkits (project_id, slug, source_kind) VALUES (1, ?, 'openapi')",
                    (f"k{i}",),
                )
            )
        return ids


async def _put(db: Database, vault: Vault, kit: int, value: str) -> None:
    async with db.write() as tx:
        await store.put(tx, vault, kit, "bearer", {}, {"token": value})


async def _read(db: Database, vault: Vault, kit: int) -> dict[str, str]:
    async with db.read() as conn:
        stored = await store.get(conn, kit)
        assert stored is not None
        return await store.open_secret(conn, vault, stored)


def test_an_empty_vault_creates_a_private_key_file_once_and_reuses_it(tmp_path: Path) -> None:
    settings_ = _settings(tmp_path)

    async def body(db: Database) -> None:
        await Vault.open(db, settings_)

    run(body, tmp_path)
    key_file = tmp_path / "master.key"
    first = key_file.read_text()
    assert key_file.stat().st_mode & 0o777 == 0o600
    run(body, tmp_path)
    assert key_file.read_text() == first


def test_a_wrong_missing_or_malformed_master_key_stops_start_up_and_changes_nothing(tmp_path: Path) -> None:
    settings_ = _settings(tmp_path)

    async def seed(db: Database) -> None:
        vault = await Vault.open(db, settings_)
        (kit,) = await _toolkits(db, 1)
        await _put(db, vault, kit, "CANARY-keep-me")

    run(seed, tmp_path)
    key_file = tmp_path / "master.key"
    good = key_file.read_text()

    async def opens(db: Database) -> None:
        await Vault.open(db, settings_)

    key_file.write_text(new_key().hex() + "\n")
    with pytest.raises(ConfigError, match="wrong key"):
        run(opens, tmp_path)
    key_file.write_text("not-a-key\n")
    with pytest.raises(ConfigError, match="malformed"):
        run(opens, tmp_path)
    key_file.unlink()
    with pytest.raises(ConfigError, match="no master key"):
        run(opens, tmp_path)
    assert not key_file.exists(), "a missing key must never be silently replaced"
    wrong_env = _settings(tmp_path, TOOLSPOKE_MASTER_KEY=new_key().hex())
    with pytest.raises(ConfigError, match="TOOLSPOKE_MASTER_KEY"):
        run(lambda db: Vault.open(db, wrong_env), tmp_path)

    # The right key from the environment opens the same vault, data intact.
    right_env = _settings(tmp_path, TOOLSPOKE_MASTER_KEY=good.strip())

    async def check(db: Database) -> dict[str, str]:
        return await _read(db, await Vault.open(db, right_env), 1)

    assert run(check, tmp_path) == {"token": "CANARY-keep-me"}


def test_a_master_key_that_does_not_open_the_vault_says_how_many_credentials_it_would_lock_away(
    tmp_path: Path,
) -> None:
    """Issue 16 item 12: besides the reason, how many stored credentials are sealed under the
    data keys the key cannot open, counted without any key (from the rows' key version)."""
    settings_ = _settings(tmp_path)

    async def seed(db: Database) -> None:
        vault = await Vault.open(db, settings_)
        kits = await _toolkits(db, 3)
        for kit in kits:
            await _put(db, vault, kit, f"CANARY-{kit}-value")
        # A data key version wrapped under some other master key (a rekey gone astray), sealing
        # one of the three credentials: only that one is at stake for the key in the file.
        stray = Sealer(new_key(), 1).seal(new_key(), context("vault_keys", 2, "key"))
        async with db.write() as tx:
            await tx.run("INSERT INTO vault_keys (version, wrapped) VALUES (2, ?)", (stray,))
            await tx.run("UPDATE secrets SET key_version = 2 WHERE toolkit_id = ?", (kits[0],))

    run(seed, tmp_path)

    def refusal(settings: config.Settings) -> ConfigError:
        with pytest.raises(ConfigError) as caught:
            run(lambda db: Vault.open(db, settings), tmp_path)
        return caught.value

    partly = refusal(settings_)
    assert "does not open this vault (data key version 2)" in partly.public_message
    assert "1 stored credential (of 3) is sealed under the data key it cannot open (version 2)" in (
        partly.public_message
    )
    assert partly.data["sealed"] == 1
    wrong = refusal(_settings(tmp_path, TOOLSPOKE_MASTER_KEY=new_key().hex()))
    assert "3 stored credentials (of 3) are sealed under the data keys it cannot open (versions 1, 2)" in (
        wrong.public_message
    )
    (tmp_path / "master.key").unlink()
    missing = refusal(settings_)
    assert (
        "no master key" in missing.public_message and "3 stored credentials (of 3)" in missing.public_message
    )
    # The restore check (a backup not open yet) says the same from the counts it is handed.
    with pytest.raises(ConfigError, match=r"2 stored credentials \(of 2\) are sealed"):
        check_opens(_settings(tmp_path, TOOLSPOKE_MASTER_KEY=new_key().hex()), [(1, stray_key())], {1: 2})


def stray_key() -> bytes:
    return Sealer(new_key(), 1).seal(new_key(), context("vault_keys", 1, "key"))


def test_rotation_reseals_every_secret_under_a_new_version_and_the_old_one_can_be_retired(
    tmp_path: Path,
) -> None:
    """VAULT-06: new seals use the new version, old blobs open until retired."""
    settings_ = _settings(tmp_path)

    async def body(db: Database) -> None:
        vault = await Vault.open(db, settings_)
        kits = await _toolkits(db, 25)
        for kit in kits:
            await _put(db, vault, kit, f"value-{kit}")
        with pytest.raises(Conflict, match="primary"):
            await store.retire(db, vault, 1)
        # A second process (the CLI) rotates while this one keeps its cached keys.
        other = await Vault.open(db, settings_)
        report = await store.rotate(db, other, batch=7)
        assert report == {"version": 2, "resealed": 25}
        for kit in kits:
            assert await _read(db, vault, kit) == {"token": f"value-{kit}"}
        async with db.read() as conn:
            status = await store.status(conn)
        assert [(s["version"], s["secrets"], s["live"]) for s in status] == [(1, 0, True), (2, 25, True)]
        await store.retire(db, other, 1)
        async with db.read() as conn:
            row = await conn.one("SELECT wrapped, retired_at FROM vault_keys WHERE version = 1")
        assert row["wrapped"] is None and row["retired_at"]
        # New seals use the new version; the vault still opens at start-up.
        await _put(db, vault, kits[0], "again")
        async with db.read() as conn:
            stored = await store.get(conn, kits[0])
        assert stored is not None and stored.key_version == 2
        await Vault.open(db, settings_)

    run(body, tmp_path)


def test_retiring_a_version_that_still_seals_a_secret_is_refused_naming_the_toolkit(tmp_path: Path) -> None:
    """VAULT-06: a straggler still sealed under an old version keeps it from retiring, naming the toolkit."""
    settings_ = _settings(tmp_path)

    async def body(db: Database) -> Any:
        vault = await Vault.open(db, settings_)
        (kit,) = await _toolkits(db, 1)
        await _put(db, vault, kit, "x" * 10)
        async with db.write() as tx:
            await vault.add_version(tx)  # a version added, the straggler not yet re-sealed
        with pytest.raises(Conflict) as refused:
            await store.retire(db, vault, 1)
        assert refused.value.data["toolkits"] == ["default/k0"]

    run(body, tmp_path)


def test_no_plaintext_secret_reaches_the_database_file_or_its_wal(tmp_path: Path) -> None:
    """VAULT-01 / I-4: no plaintext secret in the database file or its WAL."""
    settings_ = _settings(tmp_path)
    canary = "CANARY-" + os.urandom(16).hex()

    async def body(db: Database) -> None:
        vault = await Vault.open(db, settings_)
        (kit,) = await _toolkits(db, 1)
        await _put(db, vault, kit, canary)
        await store.rotate(db, vault)

    run(body, tmp_path)
    for path in tmp_path.glob("toolspoke.db*"):
        assert canary.encode() not in path.read_bytes()


def test_rekey_replaces_the_key_file_and_only_the_new_key_opens_the_vault(tmp_path: Path) -> None:
    from appliance.vault.keyring import rekey_file

    settings_ = _settings(tmp_path)

    async def body(db: Database) -> None:
        vault = await Vault.open(db, settings_)
        (kit,) = await _toolkits(db, 1)
        await _put(db, vault, kit, "CANARY-rekeyed")
        old = (tmp_path / "master.key").read_text()
        serving = await Vault.open(db, settings_)  # another process, holding the old key
        done = await rekey_file(db, vault, settings_)
        assert done["data_keys"] == 1
        new = (tmp_path / "master.key").read_text()
        assert new != old and not (tmp_path / "master.key.new").exists()
        assert (tmp_path / "master.key").stat().st_mode & 0o777 == 0o600
        assert await _read(db, vault, kit) == {"token": "CANARY-rekeyed"}
        # A version made after the rekey is sealed under the new key; the old process
        # re-reads the key file when it meets it.
        await store.rotate(db, vault)
        assert await _read(db, serving, kit) == {"token": "CANARY-rekeyed"}
        with pytest.raises(ConfigError, match="wrong key"):
            await Vault.open(db, _settings(tmp_path, TOOLSPOKE_MASTER_KEY=old.strip()))
        with pytest.raises(ConfigError, match="TOOLSPOKE_MASTER_KEY"):
            await rekey_file(db, vault, _settings(tmp_path, TOOLSPOKE_MASTER_KEY=new.strip()))

    run(body, tmp_path)
