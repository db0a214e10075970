"""Putting a backup in place of the database: a checked copy first, then one rename.

``stage`` copies the backup beside the database under a temporary name (0600, fsynced), with
the backup's ``-wal`` folded in when one lies beside it, and checks that copy, the very
bytes that will be put in place: an SQLite file, sound (``integrity_check``,
``foreign_key_check``), a toolspoke database (its ``schema_migrations`` names the
migrations this binary ships) at a schema version this binary can migrate. It
also hands back the backup's wrapped data keys, for the caller to try the master key on.
Nothing under the database's own names has been touched by then.

``swap`` then keeps the current database and puts the copy in place. Order matters, so
that a kill at any point leaves a usable database under ``toolspoke.db``, old or new:

1. the old database's WAL is folded in (a checkpoint: a ``-wal`` left by a killed runner
   may hold commits the main file lacks, and may even be mid-checkpoint);
2. the old file is hard-linked as ``toolspoke.db.pre-restore-<UTC time>`` (0600), and a
   ``-wal`` that could not be folded in is linked beside it, so that copy is whole;
3. ``-wal`` and ``-shm`` go: SQLite would replay an old ``-wal`` onto the new file;
4. the staged copy is renamed over ``toolspoke.db``; the directory is fsynced after each step.

The link, not a copy, makes step 2 instant and needs no second copy's disk space (a
filesystem without hard links gets a copy); after step 4 the old inode lives under the
pre-restore name only. A pre-restore name that is still the
live file's own inode is the trace of a restore killed between steps 2 and 4; the next
restore drops that link, as it does stale staged copies.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import sqlean

from appliance.db.backup import fsync_path
from appliance.db.connection import _connect
from appliance.db.migrate import default_migrations_dir, discover
from appliance.errors import ApplianceError, InvalidParams

_HEADER = b"SQLite format 3\x00"
_STAGED = ".restore-"
_KEPT = ".pre-restore-"


@dataclass(frozen=True)
class Staged:
    path: Path
    size: int
    schema_version: int
    vault_keys: list[tuple[int, bytes]]  # (version, wrapped data key) of every live key
    sealed: dict[int, int] = field(default_factory=dict)  # key version -> credentials it seals


def stage(backup: Path, db: Path, migrations: Path | None = None) -> Staged:
    """A checked copy of ``backup`` beside ``db``; InvalidParams (field ``backup``) naming the fault."""
    backup = Path(os.path.abspath(backup))
    _check_source(backup, db)
    _sweep(db)
    # One fixed name: restores run one at a time (the caller holds the data directory alone).
    staged = db.with_name(f"{_STAGED}{db.name}")
    try:
        wal = Path(f"{backup}-wal")
        try:
            _copy(backup, staged)
            if wal.is_file() and wal.stat().st_size > 0:
                _copy(wal, Path(f"{staged}-wal"))
        except OSError as exc:
            raise ApplianceError(f"cannot copy {backup} into {db.parent}: {exc.strerror}") from None
        _fold(staged, backup)
        version, keys, sealed = _verify(staged, backup, migrations or default_migrations_dir())
        return Staged(staged, staged.stat().st_size, version, keys, sealed)
    except BaseException:
        discard(staged)
        raise


def _fold(staged: Path, backup: Path) -> None:
    """Fold a ``-wal`` copied with the backup into the staged copy, then remove it.

    A backup can come with a ``-wal`` beside it: a pre-restore copy whose WAL could not be
    folded in before it was kept (step 2 above), or a database copied with its WAL. Its
    latest commits live only there, so restoring the main file alone would silently lose
    them; what is checked and put in place is the file with the WAL folded in.
    """
    wal = Path(f"{staged}-wal")
    if not wal.exists():
        return
    try:
        conn = _connect(str(staged), writer=True)
        try:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            conn.close()
    except (sqlean.Error, ApplianceError) as exc:
        raise InvalidParams(f"{backup}-wal cannot be folded into the copy: {exc}", field="backup") from None
    if int(busy) != 0:
        raise InvalidParams(f"{backup}-wal cannot be folded into the copy (busy)", field="backup")
    for leftover in (wal, Path(f"{staged}-shm")):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()


def discard(staged: Path) -> None:
    """Remove a staged copy (and any WAL files SQLite left beside it); nothing if already gone."""
    for path in (staged, Path(f"{staged}-wal"), Path(f"{staged}-shm"), Path(f"{staged}-journal")):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def swap(staged: Staged, db: Path) -> Path | None:
    """Keep the current database and put ``staged`` in its place; the kept copy's path, if any."""
    directory = db.parent
    wal = Path(f"{db}-wal")
    kept = None
    if db.exists() and db.stat().st_size > 0:  # an empty file is what a failed first start leaves
        folded = _checkpoint(db)
        kept = _keep(db)
        if not folded and wal.exists() and wal.stat().st_size > 0:
            _link(wal, Path(f"{kept}-wal"))  # the old state stays whole under the kept name
        fsync_path(directory)
    for stale in (wal, Path(f"{db}-shm"), Path(f"{db}-journal")):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    fsync_path(directory)
    os.replace(staged.path, db)
    fsync_path(directory)
    return kept


def _check_source(backup: Path, db: Path) -> None:
    if not backup.is_file():
        raise InvalidParams(f"{backup} is not a file", field="backup")
    if db.exists() and backup.samefile(db):
        raise InvalidParams(f"{backup} is the live database itself", field="backup")
    with open(backup, "rb") as fh:
        if fh.read(len(_HEADER)) != _HEADER:
            raise InvalidParams(f"{backup} is not an SQLite database (no SQLite header)", field="backup")


def _verify(
    staged: Path, backup: Path, migrations: Path
) -> tuple[int, list[tuple[int, bytes]], dict[int, int]]:
    try:
        conn = _connect(str(staged), writer=False)
    except sqlean.Error as exc:
        raise InvalidParams(f"{backup} cannot be opened as a database: {exc}", field="backup") from None
    try:
        try:
            problems = [str(r[0]) for r in conn.execute("PRAGMA integrity_check(5)")]
        except sqlean.Error as exc:  # damage bad enough to stop the check itself
            problems = [str(exc)]
        if problems != ["ok"]:
            raise InvalidParams(f"{backup} failed its integrity check: {'; '.join(problems)}", field="backup")
        if conn.execute("PRAGMA foreign_key_check").fetchone() is not None:
            raise InvalidParams(f"{backup} failed its foreign key check", field="backup")
        version = _schema(conn, backup, migrations)
        keys: list[tuple[int, bytes]] = []
        sealed: dict[int, int] = {}
        if _has_table(conn, "vault_keys"):
            rows = conn.execute("SELECT version, wrapped FROM vault_keys WHERE wrapped IS NOT NULL")
            keys = [(int(r[0]), bytes(r[1])) for r in rows]
        if keys and _has_table(conn, "secrets"):  # what a key that does not open would lock away
            counted = conn.execute("SELECT key_version, COUNT(*) FROM secrets GROUP BY key_version")
            sealed = {int(r[0]): int(r[1]) for r in counted}
        return version, keys, sealed
    except sqlean.Error as exc:
        raise InvalidParams(f"{backup} could not be checked: {exc}", field="backup") from None
    finally:
        conn.close()


def _schema(conn: sqlean.Connection, backup: Path, migrations: Path) -> int:
    """The backup's schema version, once its recorded migrations are known to be toolspoke's."""
    if not _has_table(conn, "schema_migrations"):
        raise InvalidParams(
            f"{backup} is not a toolspoke database (no schema_migrations table)", field="backup"
        )
    done = {int(r[0]): str(r[1]) for r in conn.execute("SELECT version, name FROM schema_migrations")}
    if not done:
        raise InvalidParams(f"{backup} is not a toolspoke database (no migration recorded)", field="backup")
    known = {number: name for number, name, _ in discover(migrations)}
    newest = max(known, default=0)
    version = max(done)
    if version > newest:
        raise InvalidParams(
            f"{backup} is at schema version {version}, newer than this toolspoke knows ({newest}); "
            "restore it with a newer toolspoke",
            field="backup",
        )
    for number, name in sorted(done.items()):
        if known.get(number) != name:
            raise InvalidParams(
                f"{backup} is not a toolspoke database (its migration {number} is {name!r}, "
                f"toolspoke's is {known.get(number)!r})",
                field="backup",
            )
    return version


def _has_table(conn: sqlean.Connection, name: str) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", (name,)).fetchone()
    return row is not None


def _checkpoint(db: Path) -> bool:
    """Fold the old database's WAL into its file; False when that cannot be done (a damaged file)."""
    if not Path(f"{db}-wal").exists():
        return True
    try:
        conn = _connect(str(db), writer=True)
        try:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            return int(busy) == 0
        finally:
            conn.close()
    except (sqlean.Error, ApplianceError):
        return False


def _keep(db: Path) -> Path:
    """The current database under a free pre-restore name (0600)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in range(100):
        kept = db.with_name(f"{db.name}{_KEPT}{stamp}" + (f"-{n}" if n else ""))
        try:
            _link(db, kept)
        except FileExistsError:
            continue
        os.chmod(kept, 0o600)
        return kept
    raise ApplianceError(f"no free name for the pre-restore copy of {db}")


def _link(source: Path, target: Path) -> None:
    """A hard link, or a copy where the filesystem has none (some network and FUSE mounts)."""
    try:
        os.link(source, target)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EXDEV):
            raise
        _copy(source, target)


def _copy(source: Path, target: Path) -> None:
    """``source`` to a new file ``target``, 0600 from the first byte, fsynced."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(source, "rb") as src, os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())


def _sweep(db: Path) -> None:
    """Leftovers of a restore that was killed: staged copies, pre-restore links to live files."""
    for path in db.parent.glob(f"{_STAGED}{db.name}*"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    for path in db.parent.glob(f"{db.name}{_KEPT}*"):
        live = Path(f"{db}-wal") if path.name.endswith("-wal") else db
        with contextlib.suppress(FileNotFoundError):
            if live.exists() and path.samefile(live):
                path.unlink()
