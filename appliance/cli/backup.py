"""``toolspoke backup PATH``: an online, consistent copy of the database (RELIABILITY CRASH-06)."""

from __future__ import annotations

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

    from appliance.gateway.data_dir import backup_to

    settings = settings_for(config_file, data_dir=data_dir)
    try:
        report = backup_to(settings, Path(path), force=force)
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

    from appliance.gateway.data_dir import restore_from

    settings = settings_for(config_file, data_dir=data_dir)
    try:
        report = restore_from(settings, Path(backup_path))
    except ApplianceError as exc:
        fail(exc.public_message, 2 if isinstance(exc, ConfigError) else 1)
    if as_json:
        emit(
            {
                "path": str(report.path),
                "bytes": report.bytes,
                "schema_version": report.schema_version,
                "kept": str(report.kept) if report.kept else None,
            }
        )
        return
    click.echo(
        f"restored {backup_path} to {report.path} ({report.bytes} bytes, schema "
        f"{report.schema_version}); "
        + (
            f"the previous database is kept as {report.kept}"
            if report.kept
            else "there was no previous database"
        ),
        err=True,
    )
