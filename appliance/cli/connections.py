"""``toolspoke connections``: each person's own connection to ``per_user`` toolkits (issue 19).

The CLI is the operator, so it always names the person (``--user``). ``connect`` prints the
authorization URL (the device-free path: open it in any browser; the authorization server
sends it back to the appliance's own ``/oauth/callback``, which a running ``serve`` answers)
or, with ``--scheme``, seals the person's own token, key or Basic password read from an
environment variable or standard input, never from argv. ``mode`` sets a toolkit's mode and
shows who is connected. No command ever prints a token.
"""

from __future__ import annotations

from typing import Any

import click

from appliance.cli.common import STORE, emit, fail, guard, main, operate
from appliance.cli.vault import secret_from
from appliance.models import OPERATOR


@main.group()
def connections() -> None:
    """Each person's own connection to per_user toolkits: list, connect, disconnect, mode, client."""


def _line(c: dict[str, Any]) -> str:
    where = f"{c['project']}/{c['toolkit']}"
    if not c.get("connected") and c.get("status") == "not_connected":
        return (
            f"{where}: not connected ({', '.join(c.get('schemes') or []) or 'no scheme'}); {c['connect_url']}"
        )
    scopes = " ".join(c.get("scopes") or [])
    expiry = f", expires {c['expires_at']:.0f}" if c.get("expires_at") else ""
    return f"{where}: {c['status']} ({c['scheme']}{f'; {scopes}' if scopes else ''}{expiry})"


@connections.command("list")
@click.option("--user", required=True, help="Whose connections.")
@STORE
@guard
def connections_list(user: str, data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """The per_user toolkits USER sees, with USER's status there (never a token)."""
    from appliance.gateway.admin import connections as ops

    shown = operate(data_dir, config_file, lambda rt: ops.mine(rt, OPERATOR, user=user))
    if as_json:
        emit(shown)
        return
    for c in shown["connections"]:
        click.echo(_line(c))
    if not shown["connections"]:
        click.echo("no per_user toolkit")


@connections.command("connect")
@click.argument("slug")
@click.option("--user", required=True, help="Who connects.")
@click.option(
    "--scheme",
    type=click.Choice(["oauth", "bearer", "header", "basic", "query", "cookie"]),
    default="oauth",
    show_default=True,
)
@click.option("--from-env", "from_env", metavar="VAR", help="Environment variable holding the secret.")
@click.option("--stdin", "from_stdin", is_flag=True, help="Read the secret from standard input.")
@click.option("--name", default=None, help="header, query, cookie: the name to send it as.")
@click.option("--username", default=None, help="basic: the user name (the password is the secret).")
@click.option("--project", default="default", show_default=True)
@STORE
@guard
def connections_connect(
    slug: str,
    user: str,
    scheme: str,
    from_env: str | None,
    from_stdin: bool,
    name: str | None,
    username: str | None,
    project: str,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Connect USER to SLUG: print the authorization URL (oauth), or seal USER's own secret.

    \b
    toolspoke connections connect linear --user alice          # open the printed URL
    toolspoke connections connect crm --user bob --scheme bearer --from-env BOB_CRM_TOKEN
    """
    from appliance.gateway.admin import connections as ops

    if scheme == "oauth":
        if from_env or from_stdin:
            fail("an OAuth connection takes no secret: open the printed URL", 2)
        started = operate(data_dir, config_file, lambda rt: ops.start(rt, OPERATOR, slug, project, user=user))
        if as_json:
            emit(started)
            return
        click.echo(started["authorization_url"])
        click.echo(
            f"open this URL in a browser within {started['expires_in'] // 60} minutes; the authorization "
            f"server sends it back to {started['redirect_uri']} (the serving appliance finishes there)",
            err=True,
        )
        return
    doc: dict[str, Any] = {"scheme": scheme}
    key = {"bearer": "token", "basic": "password"}.get(scheme, "value")
    doc[key] = secret_from(from_env, from_stdin)
    doc.update({k: v for k, v in {"name": name, "username": username}.items() if v is not None})
    shown = operate(
        data_dir, config_file, lambda rt: ops.set_own(rt, OPERATOR, slug, project, doc, user=user)
    )
    emit(shown) if as_json else click.echo(_line(shown))


@connections.command("disconnect")
@click.argument("slug")
@click.option("--user", required=True, help="Whose connection.")
@click.option("--project", default="default", show_default=True)
@STORE
@guard
def connections_disconnect(
    slug: str, user: str, project: str, data_dir: str | None, config_file: str | None, as_json: bool
) -> None:
    """Revoke USER's tokens at the authorization server (where it offers it) and delete them."""
    from appliance.gateway.admin import connections as ops

    done = operate(data_dir, config_file, lambda rt: ops.disconnect(rt, OPERATOR, slug, project, user=user))
    if as_json:
        emit(done)
        return
    if not done["disconnected"]:
        click.echo(f"{project}/{slug}: {user} was not connected")
        return
    revoked = {True: "revoked and deleted", False: "deleted (not revoked)", None: "deleted"}[done["revoked"]]
    click.echo(f"{project}/{slug}: {user}'s connection {revoked}")


@connections.command("mode")
@click.argument("slug")
@click.argument("mode", required=False, type=click.Choice(["shared", "per_user"]))
@click.option("--project", default="default", show_default=True)
@STORE
@guard
def connections_mode(
    slug: str, mode: str | None, project: str, data_dir: str | None, config_file: str | None, as_json: bool
) -> None:
    """Show (or set to MODE) SLUG's connection mode, and who is connected (names only)."""
    from appliance.gateway.admin import connections as ops

    def work(rt: Any) -> Any:
        if mode is None:
            return ops.toolkit_connections(rt, OPERATOR, slug, project)
        return ops.set_mode(rt, OPERATOR, slug, project, mode)

    shown = operate(data_dir, config_file, work)
    if as_json:
        emit(shown)
        return
    who = ", ".join(f"{c['user']} ({c['status']})" for c in shown["connected"]) or "nobody"
    click.echo(f"{project}/{slug}: {shown['mode']}; connected: {who}")


@connections.command("client")
@click.argument("slug")
@click.option("--client-id", "client_id", default=None, help="The client id registered at the spec's server.")
@click.option("--secret-env", "secret_env", metavar="VAR", help="Environment variable holding its secret.")
@click.option(
    "--auth-method",
    "auth_method",
    type=click.Choice(["none", "client_secret_basic", "client_secret_post"]),
    default=None,
    help="How the client authenticates at the token endpoint (default: Basic with a secret, else none).",
)
@click.option("--clear", is_flag=True, help="Remove the toolkit's client.")
@click.option("--project", default="default", show_default=True)
@STORE
@guard
def connections_client(
    slug: str,
    client_id: str | None,
    secret_env: str | None,
    auth_method: str | None,
    clear: bool,
    project: str,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Show (or set, or --clear) the OAuth client of an OpenAPI toolkit whose spec declares an
    authorization-code flow: the client id registered there and its secret (sealed; never shown)."""
    from appliance.gateway.admin import connections as ops

    doc: dict[str, Any] = {}
    if client_id is not None:
        doc = {"client_id": client_id, "auth_method": auth_method}
        if secret_env:
            doc["client_secret"] = secret_from(secret_env, False)
    elif secret_env or auth_method:
        fail("--secret-env and --auth-method go with --client-id", 2)

    def work(rt: Any) -> Any:
        if clear:
            return ops.clear_client(rt, OPERATOR, slug, project)
        if doc:
            return ops.set_client(rt, OPERATOR, slug, project, doc)
        return ops.oauth_client(rt, OPERATOR, slug, project)

    shown = operate(data_dir, config_file, work)
    if as_json:
        emit(shown)
        return
    if clear:
        click.echo(f"{project}/{slug}: OAuth client {'cleared' if shown['cleared'] else 'was not set'}")
        return
    client = shown["client"]
    flow = shown["flow"] or {}
    said = (
        f"{client['client_id']} ({client['auth_method']}"
        f"{', secret set' if client['client_secret_set'] else ''})"
        if client
        else "not set"
    )
    click.echo(
        f"{project}/{slug}: OAuth client {said}; authorization at {flow.get('authorization_url', '-')}"
    )
