"""Commands on the catalogue: toolkits, search, call, eval, re-sync, approval, reclassification."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click
import orjson

from appliance.cli.acting import KEY, acting
from appliance.cli.common import (
    STORE,
    emit,
    fail,
    guard,
    main,
    operate,
    run,
    settings_for,
)
from appliance.errors import ApplianceError
from appliance.models import OPERATOR


@main.group(invoke_without_command=True)
@click.option("--project", default=None)
@STORE
@click.pass_context
def toolkits(
    ctx: click.Context, project: str | None, data_dir: str | None, config_file: str | None, as_json: bool
) -> None:
    """List toolkits (or use a subcommand)."""
    ctx.obj = {"data_dir": data_dir, "config_file": config_file}
    if ctx.invoked_subcommand is not None:
        return
    from appliance.gateway.admin.toolkits import list_toolkits

    kits = run(
        settings_for(config_file, data_dir=data_dir), lambda rt: list_toolkits(rt, OPERATOR, project=project)
    )
    if as_json:
        emit(
            [
                {
                    "slug": k.slug,
                    "project": k.project,
                    "kind": k.source_kind,
                    "title": k.title,
                    "tools": k.tool_count,
                    "base_url": k.base_url,
                    "source": k.source,
                    "allowed_hosts": list(k.allowed_hosts),
                }
                for k in kits
            ]
        )
        return
    if not kits:
        click.echo("no toolkits yet; import one with `toolspoke import openapi SPEC --slug NAME`", err=True)
    for k in kits:
        reaches = f"  (reaches {', '.join(k.allowed_hosts)})" if k.allowed_hosts else ""
        click.echo(f"{k.project}/{k.slug:<24} {k.source_kind:<8} {k.tool_count:>6} tools  {k.title}{reaches}")


@toolkits.command("remove")
@click.argument("slug")
@click.option("--project", default="default", show_default=True)
@click.pass_context
def toolkits_remove(ctx: click.Context, slug: str, project: str) -> None:
    """Remove a toolkit and its tools."""
    from appliance.gateway import imports

    settings = settings_for(ctx.obj["config_file"], data_dir=ctx.obj["data_dir"])
    removed = run(settings, lambda rt: imports.remove_toolkit(rt, slug, project=project))
    click.echo(f"removed {project}/{slug} ({removed} tools)")


@main.command()
@click.argument("query")
@click.option("--toolkit", default=None)
@click.option("--project", default=None)
@click.option("--limit", type=click.IntRange(1, 100), default=None)
@KEY
@click.option(
    "--explain", is_flag=True, help="Show the ranking agents get (and why) with each tool's ranks and scores."
)
@STORE
def search(
    query: str,
    toolkit: str | None,
    project: str | None,
    limit: int | None,
    key: str | None,
    explain: bool,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Search tools the way an agent's search_tools does."""
    from appliance.gateway.answers import describe
    from appliance.gateway.searching import search as run_search

    async def work(rt: Any) -> Any:
        who = await acting(rt, key)
        return await run_search(
            rt,
            query,
            principal=who,
            toolkit=toolkit,
            project=project,
            limit=limit,
            max_limit=100,
            # What an agent's search gets, kill switch included: explaining a ranking that
            # agents are not served would mislead (`eval --ranking` compares rankings).
            ranking="auto",
        )

    outcome = operate(data_dir, config_file, work)
    tools = [r.tool for r in outcome.results]
    if as_json:
        doc: dict[str, Any] = {"results": [describe(t) for t in tools], "ranking": outcome.ranking}
        if explain:
            doc["explain"] = [_explain_row(r) for r in outcome.results]
            doc["reason"] = outcome.reason
        emit(doc)
        return
    if not tools:
        click.echo("no matching tools", err=True)
    if explain:
        why = f" ({outcome.reason})" if outcome.reason else ""
        click.echo(f"ranking: {outcome.ranking}{why}")
        click.echo(f"{'tool':<48} {'score':>7} {'lex#':>5} {'bm25':>7} {'sem#':>5} {'cosine':>7} {'asks':>7}")
        for r in outcome.results:
            row = _explain_row(r)
            click.echo(
                f"{row['name']:<48} {row['score']:>7.3f} {_cell(row['lexical_rank'], 'd')} "
                f"{_cell(row['lexical_score'], '.2f')} {_cell(row['semantic_rank'], 'd')} "
                f"{_cell(row['semantic_score'], '.3f')} {_cell(row['ask_part'], '+.3f')}"
            )
        return
    for t in tools:
        click.echo(f"{t.name:<48} {t.kind:<11} {(t.description or t.title)[:80]}")


def _explain_row(r: Any) -> dict[str, Any]:
    return {
        "name": r.tool.name,
        "score": r.score,
        "lexical_rank": r.lexical_rank,
        "lexical_score": r.lexical_score,
        "semantic_rank": r.semantic_rank,
        "semantic_score": r.semantic_score,
        # what each term gave the fused score (None where it took no part; search/hybrid.py)
        "lexical_part": r.lexical_part,
        "semantic_part": r.semantic_part,
        "service_part": r.service_part,
        "ask_part": r.ask_part,
        "usage_part": r.usage_part,
    }


def _cell(value: Any, fmt: str) -> str:
    return f"{'-':>5}" if value is None else format(value, fmt).rjust(5 if fmt == "d" else 7)


@main.command()
@click.argument("tool")
@click.option("--input", "input_json", default="{}", help="Arguments as a JSON object.")
@click.option("--project", default=None)
@click.option("--approval", default=None, help="The approval that covers this call (a retry).")
@KEY
@STORE
def call(
    tool: str,
    input_json: str,
    project: str | None,
    approval: str | None,
    key: str | None,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Call a tool by its exact name, as the operator (or as --key)."""
    from appliance.gateway.imports import ensure_demo
    from appliance.gateway.pipeline import call_tool

    try:
        arguments = orjson.loads(input_json)
    except orjson.JSONDecodeError as exc:
        fail(f"--input is not valid JSON: {exc}", 2)
    if not isinstance(arguments, dict):
        fail("--input must be a JSON object", 2)

    async def work(rt: Any) -> Any:
        await ensure_demo(rt)  # a fresh or older data directory gets the demo as `serve` would
        return await call_tool(rt, await acting(rt, key), tool, arguments, project=project, approval=approval)

    result = operate(data_dir, config_file, work)
    if as_json:
        emit(
            {
                "content": result.content,
                "structuredContent": result.structured,
                "isError": result.is_error,
                "meta": result.meta,
            }
        )
    else:
        for part in result.content:
            click.echo(part.get("text", orjson.dumps(part).decode()))
    if result.is_error:
        sys.exit(1)


@main.command(name="eval")
@click.argument("queries", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--from-usage",
    is_flag=True,
    help="Score on the usage log instead: each logged search that led to a call, the called tool relevant.",
)
@click.option(
    "--limit",
    type=click.IntRange(10, 100),
    default=100,
    show_default=True,
    help="Results per query (MRR looks at this many).",
)
@click.option(
    "--ranking",
    type=click.Choice(["auto", "lexical", "semantic", "hybrid"]),
    default="auto",
    show_default=True,
    help="Which ranking to score (semantic and hybrid need an embedding provider and a backfill).",
)
@click.option("--toolkit", default=None)
@click.option("--project", default=None)
@STORE
def eval_(
    queries: str | None,
    from_usage: bool,
    limit: int,
    ranking: str,
    toolkit: str | None,
    project: str | None,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Score search on labelled queries (JSONL: id, query, gold), or on the usage log
    (--from-usage): Recall@k, nDCG@10, MRR, latency."""
    from appliance.gateway.evaluation import evaluate, evaluate_usage, read_queries

    if (queries is None) == (not from_usage):
        fail("give either a queries file or --from-usage", 2)
    started = time.perf_counter()
    if from_usage:
        if toolkit or project:
            fail("--from-usage replays every toolkit: --toolkit and --project do not apply", 2)
        summary = operate(
            data_dir,
            config_file,
            lambda rt: evaluate_usage(rt, limit=limit, ranking=ranking),  # type: ignore[arg-type]
        )
    else:
        assert queries is not None
        try:
            items = read_queries(Path(queries).read_bytes())
        except ApplianceError as exc:
            fail(exc.public_message, 2)
        summary = operate(
            data_dir,
            config_file,
            lambda rt: evaluate(rt, items, limit=limit, toolkit=toolkit, project=project, ranking=ranking),  # type: ignore[arg-type]
        )
    if as_json:
        emit(summary)
        return
    click.echo(
        f"{summary['queries']} queries in {time.perf_counter() - started:.1f}s, ranking {summary['ranking']}"
    )
    if "usage" in summary:
        logged = summary["usage"]
        click.echo(
            f"  from the usage log: {logged['searches']} searches, {logged['called']} led to a call "
            f"(scored), {logged['misses']} misses (no call: not scored)"
        )
    for key in ("recall@1", "recall@5", "recall@10", "ndcg@10", "mrr"):
        click.echo(f"  {key:<10} {summary[key]:.3f}")
    lat = summary["latency_ms"]
    click.echo(f"  latency    p50 {lat['p50']:.2f} ms  p95 {lat['p95']:.2f} ms  p99 {lat['p99']:.2f} ms")


# -- re-sync, approval, reclassification ------------------------------------------------------


@main.command(name="sync")
@click.argument("slug")
@click.option("--project", default="default", show_default=True)
@STORE
@guard
def sync_(slug: str, project: str, data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """Re-sync an MCP toolkit: new tools arrive pending, vanished ones are disabled."""
    from appliance.gateway import sync

    report = operate(data_dir, config_file, lambda rt: sync.resync_toolkit(rt, slug, project=project))
    if as_json:
        emit(report.as_dict())
        return
    for f in report.flagged:
        click.echo(f"{'held by screening':<24} {f['name']}")
        _findings("reasons", f["screening"])
    for label, names in (
        ("added (pending)", report.added),
        ("changed (pending again)", report.changed),
        ("returned (pending)", report.returned),
        ("removed (disabled)", report.removed),
    ):
        for name in names:
            click.echo(f"{label:<24} {name}")
    click.echo(f"{project}/{slug}: {report.unchanged} unchanged, {len(report.pending)} pending approval")


@main.command()
@click.argument("slug")
@click.option("--project", default="default", show_default=True)
@STORE
@guard
def pending(slug: str, project: str, data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """List a toolkit's tools awaiting approval."""
    from appliance.gateway import sync
    from appliance.gateway.screening import reveal

    tools = operate(data_dir, config_file, lambda rt: sync.list_pending(rt, slug, project))
    if as_json:
        emit({"toolkit": slug, "project": project, "pending": tools})
        return
    for t in tools:
        click.echo(f"{t['name']:<48} {t['kind']:<12} {reveal(t['description'][:80])}")
        _findings("held by screening", t["screening"])
        for part, diff in (t["changes"] or {}).items():
            if diff:
                click.echo(f"    changed ({part}):")
                for line in diff.split("\n"):
                    click.echo(f"      {line}")
    if not tools:
        click.echo(f"{project}/{slug}: nothing pending")


def _findings(label: str, rows: list[dict[str, str]] | None) -> None:
    if not rows:
        return
    click.echo(f"    {label}:")
    for f in rows:
        evidence = f" [{f['evidence']}]" if f.get("evidence") else ""
        click.echo(f"      {f['category']}: {f['reason']}{evidence}")


@main.command()
@click.argument("slug")
@click.option("--tool", "tool_names", multiple=True, metavar="NAME", help="A tool to approve (repeatable).")
@click.option(
    "--all", "approve_all", is_flag=True, help="Approve every pending tool the screening did not flag."
)
@click.option(
    "--flagged", "with_flagged", is_flag=True, help="With --all: the tools the screening flagged too."
)
@click.option("--project", default="default", show_default=True)
@STORE
@guard
def approve(
    slug: str,
    tool_names: tuple[str, ...],
    approve_all: bool,
    with_flagged: bool,
    project: str,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Approve pending tools so agents can find and call them.

    A tool the screening flagged is approved by name (--tool), or by --all --flagged, knowing
    its reasons (`toolspoke pending` shows them)."""
    from appliance.gateway import sync

    if approve_all == bool(tool_names):
        fail("give --tool NAME (repeatable) or --all", 2)
    if with_flagged and not approve_all:
        fail("--flagged goes with --all (name a flagged tool with --tool instead)", 2)
    chosen = None if approve_all else list(tool_names)
    done = operate(
        data_dir,
        config_file,
        lambda rt: sync.approve(rt, slug, project=project, tools=chosen, flagged=with_flagged),
    )
    if as_json:
        emit({"toolkit": slug, "project": project, **done})
        return
    flagged = {f["name"]: f["screening"] for f in done["flagged"]}
    for name in done["approved"]:
        click.echo(f"approved {name}" + (" (flagged by screening)" if name in flagged else ""))
        _findings("approved over", flagged.get(name))
    for h in done["held"]:
        click.echo(f"held     {h['name']} (flagged by screening: approve it by name, or --all --flagged)")
        _findings("reasons", h["screening"])
    if not done["approved"]:
        click.echo("nothing to approve")


@main.command()
@click.argument("tool")
@click.argument("kind", type=click.Choice(["read", "write", "destructive", "auto"]))
@click.option("--project", default=None, help="Needed only when the name exists in several projects.")
@STORE
@guard
def reclassify(
    tool: str, kind: str, project: str | None, data_dir: str | None, config_file: str | None, as_json: bool
) -> None:
    """Set a tool's kind (it decides the runner agents must use); `auto` returns to the source's."""
    from appliance.gateway import sync

    result = operate(data_dir, config_file, lambda rt: sync.reclassify(rt, tool, kind, project=project))
    if as_json:
        emit(result)
        return
    click.echo(f"{result['project']}/{result['name']}: {result['kind']} (runner {result['runner']})")
