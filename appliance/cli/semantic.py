"""Commands of the semantic pass: ``backfill``, the ``semantic`` kill switch and ``learn``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from appliance.cli.common import STORE, emit, fail, main, operate


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
        + (
            f" (learned here from {doc['learned_adapter']['examples']} requests)"
            if doc["learned_adapter"]
            else ""
        )
    )


@main.command()
@click.argument("queries", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--from-usage", is_flag=True, help="Learn from the usage log: each logged search that led to a call."
)
@click.option("--forget", is_flag=True, help="Drop the adapter learned here: searches use the shipped one.")
@STORE
def learn(
    queries: str | None,
    from_usage: bool,
    forget: bool,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Learn a query adapter for this catalogue from labelled queries (JSONL: id, query, gold,
    as `eval` reads) or from the usage log; searches then use it instead of the shipped one."""
    from appliance.errors import ApplianceError
    from appliance.gateway import learning
    from appliance.gateway.evaluation import read_queries

    if [queries is not None, from_usage, forget].count(True) != 1:
        fail("give one of: a queries file, --from-usage, --forget", 2)
    if forget:
        dropped = operate(data_dir, config_file, learning.forget)
        if as_json:
            emit({"forgotten": dropped})
        else:
            click.echo("the learned adapter is dropped" if dropped else "no adapter was learned here")
        return
    if queries is not None:
        try:
            items = read_queries(Path(queries).read_bytes())
        except ApplianceError as exc:
            fail(exc.public_message, 2)
        report = operate(data_dir, config_file, lambda rt: learning.learn_from_queries(rt, items))
    else:
        report = operate(data_dir, config_file, learning.learn_from_usage)
    if as_json:
        emit(report)
        return
    held = report["held_out"]
    click.echo(
        f"learned a query adapter for {report['model']} from {report['examples']} requests "
        f"({report['skipped']} named no tool of this catalogue)"
    )
    if held["queries"]:
        click.echo(
            f"  held out ({held['queries']} requests, each half learned from the other): semantic MRR "
            f"{held['mrr_without']:.3f} without it, {held['mrr_with']:.3f} with it"
        )
    click.echo("  searches now use it; `toolspoke learn --forget` goes back to the shipped one")
