"""``toolspoke approvals``: the calls waiting for a person's yes (issue 20), listed, approved,
denied, as the operator (who may decide any) through ``gateway/admin/approvals.py``, the
operation the console's queue and ``/api/v1/approvals`` use."""

from __future__ import annotations

from typing import Any

import click

from appliance.cli.common import STORE, emit, main, operate
from appliance.gateway.admin import approvals as queue
from appliance.models import OPERATOR


@main.group()
def approvals() -> None:
    """Calls under an approve rule that wait for a person's yes."""


def _line(a: dict[str, Any]) -> str:
    who = a["asked_by"]
    asker = f"agent {who['agent']}" if who["agent"] else f"user {who['user']}"
    return (
        f"{a['id']}  {a['state']:<8} {a['tool']} ({a['kind']}, fee {a['fee']})  asked by {asker}"
        f"  expires {a['expires_at']}\n    arguments: {a['arguments']}"
    )


@approvals.command("list")
@click.option(
    "--state",
    type=click.Choice(["open", "pending", "approved", "denied", "used", "expired"]),
    default="open",
    show_default=True,
    help="open: pending and approved, not yet used.",
)
@STORE
def list_approvals(state: str, as_json: bool, data_dir: str | None, config_file: str | None) -> None:
    """List approvals, newest first (the arguments as canonical JSON)."""
    found = operate(data_dir, config_file, lambda rt: queue.list_approvals(rt, OPERATOR, state=state))
    if as_json:
        emit(found)
        return
    for item in found["approvals"]:
        click.echo(_line(item))
    if not found["approvals"]:
        click.echo(f"no {state} approvals")


def _decide(
    approval_id: str, approve: bool, as_json: bool, data_dir: str | None, config_file: str | None
) -> None:
    done = operate(data_dir, config_file, lambda rt: queue.decide(rt, OPERATOR, approval_id, approve=approve))
    if as_json:
        emit(done)
        return
    click.echo(_line(done))


@approvals.command("approve")
@click.argument("approval_id")
@STORE
def approve(approval_id: str, as_json: bool, data_dir: str | None, config_file: str | None) -> None:
    """Approve a pending call: the agent's retry with its id runs it once."""
    _decide(approval_id, True, as_json, data_dir, config_file)


@approvals.command("deny")
@click.argument("approval_id")
@STORE
def deny(approval_id: str, as_json: bool, data_dir: str | None, config_file: str | None) -> None:
    """Deny a pending call: it never runs."""
    _decide(approval_id, False, as_json, data_dir, config_file)
