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
