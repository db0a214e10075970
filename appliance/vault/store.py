"""Sealed credentials in the ``secrets`` table, and the rotation and retirement of key versions.

One row per toolkit. The row's scheme and settings (a header name, a token URL) are plain
and may be shown; the secret fields are one JSON object sealed under the vault's primary
data key and bound to ``(secrets, toolkit_id, credential)``, so a blob copied onto another
toolkit's row fails to open. Nothing here ever returns plaintext except ``open_secret``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.db import Database, ReadConn, SyncReader, WriteTx, dumps, loads
from appliance.errors import Conflict, InvalidParams
from appliance.vault import connections
from appliance.vault.crypto import context
from appliance.vault.keyring import Vault

_FIELD = "credential"


def _ctx(toolkit_id: int) -> bytes:
    return context("secrets", toolkit_id, _FIELD)


@dataclass(frozen=True)
class StoredSecret:
    """A credential row without its value: what listings may show."""

    toolkit_id: int
    scheme: str
    settings: dict[str, Any]
    key_version: int
    created_at: str
    updated_at: str
    blob: bytes

    def public(self) -> dict[str, Any]:
        return {
            "set": True,
            "scheme": self.scheme,
            "settings": self.settings,
            "key_version": self.key_version,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


async def put(
    tx: WriteTx, vault: Vault, toolkit_id: int, scheme: str, settings: dict[str, Any], fields: dict[str, str]
) -> None:
    """Seal ``fields`` and store them (replacing any earlier credential of the toolkit)."""
    version, blob = await vault.seal(tx, dumps(fields).encode(), _ctx(toolkit_id))
    await tx.run(
        "INSERT INTO secrets (toolkit_id, scheme, settings, key_version, blob) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (toolkit_id) DO UPDATE SET scheme = excluded.scheme, settings = excluded.settings,"
        " key_version = excluded.key_version, blob = excluded.blob,"
        " updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
        (toolkit_id, scheme, dumps(settings), version, blob),
    )


_SELECT = "SELECT toolkit_id, scheme, settings, key_version, blob, created_at, updated_at FROM secrets"
_GET = _SELECT + " WHERE toolkit_id = ?"


async def every_stored(conn: ReadConn) -> list[StoredSecret]:
    """Every toolkit's stored credential, sealed (redaction opens them to know the values)."""
    rows = await conn.all(_SELECT)
    return [s for s in map(stored_row, rows) if s is not None]


async def get(conn: ReadConn, toolkit_id: int) -> StoredSecret | None:
    return stored_row(await conn.one(_GET, (toolkit_id,)))


def get_in(reader: SyncReader, toolkit_id: int) -> StoredSecret | None:
    """``get`` inside a ``ReadConn.batch`` (the call path reads several things in one hop)."""
    return stored_row(reader.one(_GET, (toolkit_id,)))


def stored_row(row: Any) -> StoredSecret | None:
    """A ``secrets`` row (every column of ``_GET``) as a ``StoredSecret``."""
    if row is None:
        return None
    return StoredSecret(
        toolkit_id=int(row["toolkit_id"]),
        scheme=row["scheme"],
        settings=loads(row["settings"]) or {},
        key_version=int(row["key_version"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        blob=bytes(row["blob"]),
    )


async def open_secret(conn: ReadConn, vault: Vault, stored: StoredSecret) -> dict[str, str]:
    """The secret fields; ``SealError`` when the blob does not open (tampered, moved, retired)."""
    fields = loads(await vault.open_blob(conn, stored.blob, _ctx(stored.toolkit_id)))
    return {str(k): str(v) for k, v in fields.items()} if isinstance(fields, dict) else {}


async def delete(tx: WriteTx, toolkit_id: int) -> bool:
    before = await tx.one("SELECT 1 AS x FROM secrets WHERE toolkit_id = ?", (toolkit_id,))
    await tx.run("DELETE FROM secrets WHERE toolkit_id = ?", (toolkit_id,))
    return before is not None


async def status(conn: ReadConn) -> list[dict[str, Any]]:
    """Every key version: created, retired, and how many secrets it still seals."""
    rows = await conn.all(
        "SELECT k.version, k.created_at, k.retired_at, k.wrapped IS NOT NULL AS live,"
        " (SELECT COUNT(*) FROM secrets s WHERE s.key_version = k.version) AS secrets"
        " FROM vault_keys k ORDER BY k.version"
    )
    return [
        {
            "version": int(r["version"]),
            "created_at": r["created_at"],
            "retired_at": r["retired_at"],
            "live": bool(r["live"]),
            "secrets": int(r["secrets"]),
        }
        for r in rows
    ]


async def rotate(db: Database, vault: Vault, *, batch: int = 500) -> dict[str, int]:
    """A new primary key version, then every secret re-sealed under it, ``batch`` rows a time.

    Each batch is its own short transaction, so a serving appliance keeps answering (and
    opening either version) throughout, and a crash leaves every row whole: a row is
    rewritten atomically or not at all (VAULT-06). Rows written meanwhile already use the
    new version.
    """
    async with db.write() as tx:
        new = await vault.add_version(tx)
    done = 0
    last = -1
    while True:
        async with db.write() as tx:
            rows = await tx.all(
                "SELECT toolkit_id, key_version, blob FROM secrets"
                " WHERE key_version < ? AND toolkit_id > ? ORDER BY toolkit_id LIMIT ?",
                (new.version, last, batch),
            )
            for row in rows:
                tid = int(row["toolkit_id"])
                plain = await vault.open_blob(tx, bytes(row["blob"]), _ctx(tid))
                await tx.run(
                    "UPDATE secrets SET key_version = ?, blob = ? WHERE toolkit_id = ? AND key_version = ?",
                    (new.version, new.seal(plain, _ctx(tid)), tid, int(row["key_version"])),
                )
                last = tid
        done += len(rows)
        if len(rows) < batch:
            break
    async with db.write() as tx:  # each person's own connections (issue 19): few per toolkit
        done += await connections.rotate(tx, vault, new.version)
    return {"version": new.version, "resealed": done}


async def retire(db: Database, vault: Vault, version: int) -> dict[str, Any]:
    """Destroy a key version's wrapped key; refused while the primary or while secrets use it."""
    async with db.write() as tx:
        row = await tx.one("SELECT wrapped IS NOT NULL AS live FROM vault_keys WHERE version = ?", (version,))
        if row is None:
            raise InvalidParams(f"there is no key version {version}", field="version")
        if not row["live"]:
            raise Conflict(f"key version {version} is already retired", field="version")
        newest = await tx.one("SELECT MAX(version) AS v FROM vault_keys WHERE wrapped IS NOT NULL")
        if int(newest["v"]) == version:
            raise Conflict(
                f"key version {version} is the primary; run `toolspoke vault rotate` first", field="version"
            )
        users = await tx.all(
            "SELECT p.slug || '/' || k.slug AS kit FROM secrets s JOIN toolkits k ON k.id = s.toolkit_id"
            " JOIN projects p ON p.id = k.project_id WHERE s.key_version = ? ORDER BY kit",
            (version,),
        )
        if users:
            kits = [str(u["kit"]) for u in users]
            raise Conflict(
                f"key version {version} still seals the credentials of {', '.join(kits[:10])}"
                f"{' …' if len(kits) > 10 else ''}; run `toolspoke vault rotate` to re-seal them first",
                field="version",
                data={"toolkits": kits},
            )
        personal = await connections.sealing(tx, version)
        if personal:
            raise Conflict(
                f"key version {version} still seals {personal} personal connection(s); run "
                "`toolspoke vault rotate` to re-seal them first",
                field="version",
            )
        await tx.run(
            "UPDATE vault_keys SET wrapped = NULL, retired_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
            " WHERE version = ?",
            (version,),
        )
    vault.forget(version)
    return {"retired": version}
