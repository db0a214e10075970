"""Commands on spend and accounting: ``calls`` (history), ``credits`` (balances, grants, voids),
``quota`` (a toolkit's fee and ceilings). They act as the local operator on the data directory;
a serving appliance sees their changes within a second.
"""

from __future__ import annotations

from typing import Any

import click

from appliance.cli.common import CONFIG, DATA_DIR, JSON_OUT, emit, fail, main, number, run, settings_for
from appliance.models import OPERATOR


@main.command()
@click.option("--toolkit", default=None, help="Calls of this toolkit.")
@click.option("--project", default=None)
@click.option("--user", default=None, help="Calls made by this user (any of their keys or agents).")
@click.option("--agent", type=int, default=None, help="Calls made by this agent (id).")
@click.option(
    "--outcome", default=None, help="ok, upstream_error, is_error, blocked, rate_limited, quota, invalid"
)
@click.option("--tool", default=None, help="Exact tool name.")
@click.option("--since", default=None, help="RFC 3339 time or unix seconds.")
@click.option("--until", default=None, help="RFC 3339 time or unix seconds.")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
@click.option("--cursor", default=None, help="next_cursor of a previous page.")
@DATA_DIR
@CONFIG
@JSON_OUT
def calls(
    data_dir: str | None, config_file: str | None, as_json: bool, toolkit: str | None, **kw: Any
) -> None:
    """Call history, newest first (the audit log)."""
    from appliance.gateway import ledgering

    page = run(
        settings_for(config_file, data_dir=data_dir),
        lambda rt: ledgering.calls(rt, OPERATOR, toolkit_slug=toolkit, **kw),
    )
    if as_json:
        emit(page)
        return
    if not page["calls"]:
        click.echo("no calls", err=True)
    for c in page["calls"]:
        who = c["agent"] or c["user"] or c["key_prefix"]
        took = f"{c['duration_ms']:>8.1f} ms"
        click.echo(f"{c['at']}  {who:<16} {c['tool']:<40} {c['outcome']:<14} {took}  fee {c['fee']}")
    if page["next_cursor"]:
        click.echo(f"more: --cursor {page['next_cursor']}", err=True)


@main.group()
@DATA_DIR
@CONFIG
@click.pass_context
def credits(ctx: click.Context, data_dir: str | None, config_file: str | None) -> None:
    """Credit balances: show, grant, void a charge."""
    ctx.obj = settings_for(config_file, data_dir=data_dir)


@credits.command("show")
@click.argument("user")
@JSON_OUT
@click.pass_obj
def credits_show(settings: Any, user: str, as_json: bool) -> None:
    """A user's balance and latest ledger entries."""
    from appliance.gateway.admin import ledger

    account = run(settings, lambda rt: ledger.account(rt, OPERATOR, user))
    if as_json:
        emit(account)
        return
    click.echo(f"{user}: {account['balance']} credits")
    for e in account["entries"]:
        click.echo(f"  #{e['id']:<6} {e['at']}  {e['kind']:<6} {e['amount']:>10}  {e['note']}")


@credits.command("grant")
@click.argument("user")
@click.argument("amount")
@click.option("--note", default="", help="Why (kept in the ledger).")
@JSON_OUT
@click.pass_obj
def credits_grant(settings: Any, user: str, amount: str, note: str, as_json: bool) -> None:
    """Grant AMOUNT credits to USER (negative: take back, never below 0)."""
    from appliance.gateway.admin import ledger

    value = number(amount, "amount")
    done = run(settings, lambda rt: ledger.grant_credit(rt, OPERATOR, user, value, note=note))
    emit(done) if as_json else click.echo(f"{user}: {done['balance']} credits (entry #{done['entry']})")


@credits.command("void")
@click.argument("entry", type=int)
@click.option("--note", default="", help="Why (kept in the ledger).")
@JSON_OUT
@click.pass_obj
def credits_void(settings: Any, entry: int, note: str, as_json: bool) -> None:
    """Reverse charge ENTRY with a compensating entry (credit and quota use come back)."""
    from appliance.gateway.admin import ledger

    done = run(settings, lambda rt: ledger.void(rt, OPERATOR, entry, note=note))
    emit(done) if as_json else click.echo(
        f"charge #{entry} voided by entry #{done['void']} (+{done['amount']})"
    )


@main.group()
@DATA_DIR
@CONFIG
@click.pass_context
def quota(ctx: click.Context, data_dir: str | None, config_file: str | None) -> None:
    """A toolkit's fee and daily/monthly ceilings."""
    ctx.obj = settings_for(config_file, data_dir=data_dir)


def _print_quota(q: dict[str, Any]) -> None:
    click.echo(f"{q['project']}/{q['toolkit']}: fee {q['fee']} credits, ceilings in {q['unit']}")
    for what, fees in (("kind", q["kind_fees"]), ("tool", q["tool_fees"])):
        for name, fee in fees.items():
            click.echo(f"  {what} {name}: fee {fee} credits")
    for window in ("daily", "monthly"):
        use = q[window]
        limit = use["limit"] or "none"
        click.echo(f"  {window:<8} {use['used']} of {limit}, resets {use['resets_at']}")


@quota.command("show")
@click.argument("toolkit")
@click.option("--project", default=None)
@JSON_OUT
@click.pass_obj
def quota_show(settings: Any, toolkit: str, project: str | None, as_json: bool) -> None:
    """Fee, ceilings and the current UTC day's and month's use."""
    from appliance.gateway.admin import ledger

    q = run(settings, lambda rt: ledger.quota(rt, OPERATOR, toolkit, project))
    emit(q) if as_json else _print_quota(q)


@quota.command("set")
@click.argument("toolkit")
@click.option("--project", default=None)
@click.option("--fee", default=None, help="Credits per non-owner call.")
@click.option("--daily", default=None, help="Daily ceiling (0: none).")
@click.option("--monthly", default=None, help="Monthly ceiling (0: none).")
@click.option("--unit", type=click.Choice(["calls", "credits"]), default=None, help="What ceilings count.")
@click.option(
    "--kind-fee",
    multiple=True,
    metavar="KIND=CREDITS",
    help="The fee of its read, write or destructive tools (CREDITS 'none': the toolkit's fee again).",
)
@click.option(
    "--tool-fee", multiple=True, metavar="TOOL=CREDITS", help="One tool's own fee ('none' removes it)."
)
@JSON_OUT
@click.pass_obj
def quota_set(
    settings: Any,
    toolkit: str,
    project: str | None,
    fee: str | None,
    daily: str | None,
    monthly: str | None,
    unit: str | None,
    kind_fee: tuple[str, ...],
    tool_fee: tuple[str, ...],
    as_json: bool,
) -> None:
    """Change a toolkit's fee, ceilings or unit, and its fees per kind and per tool (the most
    specific wins: a tool's, its kind's, the toolkit's); what is not given stays."""
    from appliance.gateway.admin import ledger

    doc: dict[str, Any] = {}
    for key, raw in (("fee", fee), ("daily_limit", daily), ("monthly_limit", monthly)):
        if raw is not None:
            doc[key] = number(raw, key)
    if unit is not None:
        doc["unit"] = unit
    for key, given in (("kind_fees", kind_fee), ("tool_fees", tool_fee)):
        if given:
            doc[key] = dict(_fee(item, key) for item in given)
    if not doc:
        fail("nothing to change: give --fee, --daily, --monthly, --unit, --kind-fee or --tool-fee", 2)
    q = run(settings, lambda rt: ledger.set_quota(rt, OPERATOR, toolkit, doc, project))
    emit(q) if as_json else _print_quota(q)


def _fee(item: str, field: str) -> tuple[str, Any]:
    """``NAME=CREDITS`` (CREDITS ``none``: remove) for ``--kind-fee`` and ``--tool-fee``."""
    name, sep, raw = item.partition("=")
    if not sep or not name.strip():
        fail(f"{field}: give NAME=CREDITS, not {item!r}", 2)
    return name.strip(), None if raw.strip() == "none" else number(raw.strip(), field)
