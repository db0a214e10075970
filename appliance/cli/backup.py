"""``toolspoke backup PATH``: an online, consistent copy of the database (RELIABILITY CRASH-06)."""

from __future__ import annotations

import contextlib

import click

from appliance.cli.common import CONFIG, DATA_DIR, JSON_OUT, emit, fail, main, settings_for
from appliance.errors import ApplianceError, ConfigError


@main.command()
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Replace PATH if it exists.")
@DATA_DIR
@CONFIG
@JSON_OUT
def backup(path: str, force: bool, data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """Write a consistent copy of the live database to PATH (0600), while serving goes on.

    The copy holds the sealed vault; restoring it needs the same master key (master.key or
    TOOLSPOKE_MASTER_KEY), which is not in it: keep the two apart. Never copy toolspoke.db
    itself while the appliance runs.
    """
    from pathlib import Path

    from appliance.db import backup as db_backup

    settings = settings_for(config_file, data_dir=data_dir)
    try:
        report = db_backup.backup(settings.db_path, Path(path), force=force)
    except ConfigError as exc:
        fail(exc.public_message, 2)
    except ApplianceError as exc:
        fail(exc.public_message, 1)
    if as_json:
        emit(
            {
                "path": report.path,
                "bytes": report.bytes,
                "seconds": round(report.seconds, 3),
                "schema_version": report.schema_version,
            }
        )
        return
    click.echo(
        f"backed up {settings.db_path} to {report.path} ({report.bytes} bytes, schema "
        f"{report.schema_version}, {report.seconds:.2f} s); restoring it needs the same master key",
        err=True,
    )


@main.command()
@click.argument("backup_path", metavar="BACKUP", type=click.Path(dir_okay=False))
@DATA_DIR
@CONFIG
@JSON_OUT
def restore(backup_path: str, data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """Replace the database with BACKUP; the current one is kept as toolspoke.db.pre-restore-<UTC time>.

    Stop the appliance first: restore is refused while toolspoke serve, stdio or any other
    command has the data directory open. BACKUP is checked before anything changes: an
    SQLite file that passes integrity_check, a toolspoke database at a schema version this
    toolspoke can migrate (a newer one is refused), whose vault the configured master key
    (master.key or TOOLSPOKE_MASTER_KEY) opens. Then it is copied in and put in place with
    one rename; a kill at any point leaves the old or the new database. There is no --force:
    restore always replaces the current database, and the pre-restore copy (0600, same
    master key) is the way back. The next start migrates an older backup forwards.
    """
    from pathlib import Path

    from appliance.db import locks
    from appliance.db import restore as db_restore
    from appliance.vault import keyring

    settings = settings_for(config_file, data_dir=data_dir)
    data = Path(settings.data_dir)
    created = not data.exists()
    data.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        with locks.sole(data):
            staged = db_restore.stage(Path(backup_path), settings.db_path)
            try:
                keyring.check_opens(settings, staged.vault_keys, staged.sealed)
                kept = db_restore.swap(staged, settings.db_path)
            finally:
                db_restore.discard(staged.path)  # gone already once swapped
    except (ApplianceError, OSError) as exc:
        if isinstance(exc, OSError):  # the disk, not the backup: the old or the new database is in place
            exc = ApplianceError(f"restore failed: {exc}")
        if created:  # leave no trace of a refused restore into a new directory
            (data / locks.DATA_LOCK).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                data.rmdir()
        fail(exc.public_message, 2 if isinstance(exc, ConfigError) else 1)
    if as_json:
        emit(
            {
                "path": str(settings.db_path),
                "bytes": staged.size,
                "schema_version": staged.schema_version,
                "kept": str(kept) if kept else None,
            }
        )
        return
    click.echo(
        f"restored {backup_path} to {settings.db_path} ({staged.size} bytes, schema "
        f"{staged.schema_version}); "
        + (f"the previous database is kept as {kept}" if kept else "there was no previous database"),
        err=True,
    )
