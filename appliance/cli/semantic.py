"""Commands of the semantic pass: ``backfill`` and the ``semantic`` kill switch."""

from __future__ import annotations

import sys
from typing import Any

import click

from appliance.cli.common import STORE, emit, main, operate


@main.command()
@click.option("--batch", type=click.IntRange(1, 1024), default=32, show_default=True, help="Tools per write.")
@STORE
def backfill(batch: int, data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """Embed every tool that lacks a current vector (resumable; safe beside a running server)."""
    from appliance.gateway.backfill import backfill as run_backfill

    tty = sys.stderr.isatty()
    bar: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if tty:
            if bar is None:
                bar = click.progressbar(length=total, label="embedding", file=sys.stderr)
                bar.__enter__()
            bar.update(done - bar.pos)
        else:
            # One line per batch: a log, or a script watching a long backfill, can follow it.
            click.echo(f"embedded {done}/{total}", err=True)

    try:
        report = operate(
            data_dir, config_file, lambda rt: run_backfill(rt, batch=batch, on_progress=progress)
        )
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if as_json:
        emit({**report.__dict__, "tools_per_s": report.tools_per_s})
        return
    click.echo(
        f"{report.embedded} of {report.tools} tools embedded with {report.model} in {report.seconds:.1f}s "
        f"({report.tools_per_s:.0f} tools/s); {report.reused} reused from identical texts, "
        f"{report.removed} stale vectors removed; {report.passages} Lore passages embedded"
    )


@main.command()
@click.argument("state", type=click.Choice(["on", "off", "status"]), default="status")
@STORE
def semantic(state: str, data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """Switch the semantic pass on or off at run time (every process, no restart), or show it."""
    from appliance.gateway import semantic_admin

    async def work(rt: Any) -> dict[str, Any]:
        if state != "status":
            await semantic_admin.switch(rt, state == "on")
        return await semantic_admin.status(rt)

    doc = operate(data_dir, config_file, work)
    if as_json:
        emit(doc)
        return
    click.echo(
        f"semantic search {'on' if doc['enabled'] else 'off'}; provider {doc['provider']}"
        + (f" ({doc['model']}); {doc['embedded']}/{doc['tools']} tools embedded" if doc["model"] else "")
        + ("; query adapter on" if doc["query_adapter"] else "")
    )
