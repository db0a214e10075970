"""Commands on secrets: ``credentials``, ``vault status|rotate|retire|rekey``, ``toolkits cap``.

A secret never comes from the command line, where every local user can read it in the
process list: ``--from-env VAR`` names an environment variable holding it, ``--stdin``
reads it from standard input (one line, the trailing newline dropped).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from appliance import config
from appliance.cli.catalogue import toolkits
from appliance.cli.common import (
    CONFIG,
    DATA_DIR,
    STORE,
    emit,
    fail,
    guard,
    main,
    operate,
    run,
    settings_for,
)
from appliance.models import OPERATOR

_SCHEMES = ("bearer", "header", "query", "cookie", "basic", "oauth2", "env")


def secret_from(env_var: str | None, stdin: bool, *, what: str = "secret") -> str:
    """The secret named by ``--from-env VAR`` or read from stdin; exit 2 if neither or both."""
    if (env_var is None) == (not stdin):
        fail(f"give the {what} with --from-env VAR or --stdin (never on the command line)", 2)
    if stdin:
        value = sys.stdin.readline().rstrip("\r\n")
        if not value:
            fail(f"no {what} on standard input", 2)
        return value
    assert env_var is not None
    value = config.environment_snapshot((env_var,)).get(env_var)
    if not value:
        fail(f"environment variable {env_var} is not set or empty", 2)
    return value


def env_secrets(pairs: tuple[str, ...]) -> dict[str, str]:
    """``NAME=VAR`` pairs: the child's variable NAME gets the value of our variable VAR."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, var = pair.partition("=")
        if not sep or not name or not var:
            fail(f"--secret-env wants NAME=VAR (VAR: an environment variable holding it), got {pair!r}", 2)
        out[name] = secret_from(var, False, what=f"value of {name}")
    return out


def _show(shown: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit(shown)
        return
    where = f"{shown['project']}/{shown['toolkit']}"
    if not shown.get("set"):
        click.echo(f"{where}: no credential set")
        return
    settings = ", ".join(f"{k}={v}" for k, v in sorted(shown["settings"].items()) if v not in ("", None))
    click.echo(
        f"{where}: {shown['scheme']} credential set{f' ({settings})' if settings else ''}; "
        f"key version {shown['key_version']}, changed {shown['updated_at']}"
    )


@main.group()
def credentials() -> None:
    """Set, show (metadata only) or clear a toolkit's upstream credential."""


@credentials.command("set")
@click.argument("slug")
@click.option("--scheme", type=click.Choice(_SCHEMES), required=True)
@click.option("--from-env", "from_env", metavar="VAR", help="Environment variable holding the secret.")
@click.option("--stdin", "from_stdin", is_flag=True, help="Read the secret from standard input.")
@click.option("--name", default=None, help="Header, query or cookie name (default: the spec's apiKey name).")
@click.option("--username", default=None, help="basic: the user name (the password is the secret).")
@click.option("--token-url", default=None, help="oauth2: the token endpoint.")
@click.option("--client-id", default=None, help="oauth2: the client id (the refresh token is the secret).")
@click.option(
    "--client-secret-env", metavar="VAR", default=None, help="oauth2: variable holding the client secret."
)
@click.option("--scope", default=None, help="oauth2: scope to ask for.")
@click.option(
    "--client-auth",
    type=click.Choice(["basic", "post"]),
    default=None,
    help="oauth2: how to send the client.",
)
@click.option(
    "--secret-env", "secret_env", multiple=True, metavar="NAME=VAR", help="env: a child variable from ours."
)
@click.option("--project", default="default", show_default=True)
@STORE
@guard
def credentials_set(
    slug: str,
    scheme: str,
    from_env: str | None,
    from_stdin: bool,
    name: str | None,
    username: str | None,
    token_url: str | None,
    client_id: str | None,
    client_secret_env: str | None,
    scope: str | None,
    client_auth: str | None,
    secret_env: tuple[str, ...],
    project: str,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Seal a credential for SLUG in the vault (the value is never printed back).

    \b
    toolspoke credentials set petstore --scheme bearer --from-env PETSTORE_TOKEN
    toolspoke credentials set crm --scheme header --name X-Api-Key --stdin < key.txt
    toolspoke credentials set files --scheme basic --username bot --from-env FILES_PASSWORD
    toolspoke credentials set cal --scheme oauth2 --token-url https://auth.example.com/token \\
        --client-id abc --client-secret-env CAL_SECRET --from-env CAL_REFRESH_TOKEN
    toolspoke credentials set github --scheme env --secret-env GITHUB_TOKEN=MY_GITHUB_TOKEN
    """
    from appliance.gateway import credentials as creds

    doc: dict[str, Any] = {"scheme": scheme}
    if scheme == "env":
        if not secret_env:
            fail("scheme env needs --secret-env NAME=VAR (one or more)", 2)
        doc["env"] = env_secrets(secret_env)
    else:
        secret = secret_from(from_env, from_stdin)
        key = {"bearer": "token", "basic": "password", "oauth2": "refresh_token"}.get(scheme, "value")
        doc[key] = secret
    optional = {"name": name, "username": username, "token_url": token_url, "client_id": client_id}
    optional.update(scope=scope, client_auth=client_auth)
    doc.update({k: v for k, v in optional.items() if v is not None})
    if client_secret_env is not None:
        doc["client_secret"] = secret_from(client_secret_env, False, what="client secret")
    _show(
        operate(data_dir, config_file, lambda rt: creds.set_credential(rt, slug, doc, project=project)),
        as_json,
    )


@credentials.command("show")
@click.argument("slug")
@click.option("--project", default="default", show_default=True)
@STORE
@guard
def credentials_show(
    slug: str, project: str, data_dir: str | None, config_file: str | None, as_json: bool
) -> None:
    """Whether SLUG has a credential, its scheme and when it changed; never the value."""
    from appliance.gateway import credentials as creds

    _show(
        operate(data_dir, config_file, lambda rt: creds.show_credential(rt, slug, project=project)), as_json
    )


@credentials.command("clear")
@click.argument("slug")
@click.option("--project", default="default", show_default=True)
@DATA_DIR
@CONFIG
@guard
def credentials_clear(slug: str, project: str, data_dir: str | None, config_file: str | None) -> None:
    """Remove SLUG's credential; its calls then go out without one."""
    from appliance.gateway import credentials as creds

    removed = operate(data_dir, config_file, lambda rt: creds.clear_credential(rt, slug, project=project))
    click.echo(f"{project}/{slug}: {'credential cleared' if removed else 'had no credential'}")


@main.group()
def vault() -> None:
    """The vault's keys: status, rotate and retire data key versions; rekey the master key."""


@vault.command("status")
@STORE
@guard
def vault_status(data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """Key versions, and how many secrets each still seals."""
    from appliance.gateway.admin import vault as keys

    rows = run(settings_for(config_file, data_dir=data_dir), lambda rt: keys.status(rt, OPERATOR))
    if as_json:
        emit({"versions": rows})
        return
    if not rows:
        click.echo("the vault is empty (no credential stored yet)")
    for r in rows:
        state = f"retired {r['retired_at']}" if not r["live"] else "live"
        click.echo(
            f"version {r['version']:<4} {state:<34} {r['secrets']:>7} secrets  created {r['created_at']}"
        )


@vault.command("rotate")
@click.option("--batch", type=click.IntRange(1, 100000), default=500, show_default=True)
@STORE
@guard
def vault_rotate(batch: int, data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """Make a new key version and re-seal every secret under it (safe while serving)."""
    from appliance.gateway.admin import vault as keys

    report = run(
        settings_for(config_file, data_dir=data_dir), lambda rt: keys.rotate(rt, OPERATOR, batch=batch)
    )
    if as_json:
        emit(report)
        return
    click.echo(f"key version {report['version']} is primary; {report['resealed']} secrets re-sealed under it")
    click.echo("retire the older versions with `toolspoke vault retire VERSION`", err=True)


@vault.command("retire")
@click.argument("version", type=int)
@DATA_DIR
@CONFIG
@guard
def vault_retire(version: int, data_dir: str | None, config_file: str | None) -> None:
    """Destroy a key version no secret uses any more (old backups then cannot be opened with it)."""
    from appliance.gateway.admin import vault as keys

    run(settings_for(config_file, data_dir=data_dir), lambda rt: keys.retire(rt, OPERATOR, version))
    click.echo(f"key version {version} retired")


@vault.command("rekey")
@DATA_DIR
@CONFIG
@guard
def vault_rekey(data_dir: str | None, config_file: str | None) -> None:
    """Replace the master key file with a new random key (the data keys are re-sealed under it).

    A serving appliance keeps working and picks the new key up when it next needs it. Keep
    a copy of the new key apart from database backups; old backups still need the old key.
    """
    from appliance.gateway.admin import vault as keys

    done = run(settings_for(config_file, data_dir=data_dir), lambda rt: keys.rekey(rt, OPERATOR))
    click.echo(f"new master key in {done['key_file']}; {done['data_keys']} data keys re-sealed under it")


@toolkits.command("cap")
@click.argument("slug")
@click.argument("max_bytes", metavar="BYTES|default")
@click.option("--project", default="default", show_default=True)
@click.pass_context
def toolkits_cap(ctx: click.Context, slug: str, max_bytes: str, project: str) -> None:
    """Set the response byte cap of one toolkit (`default`: TOOLSPOKE_UPSTREAM_MAX_BYTES)."""
    from appliance.gateway import credentials as creds

    value: int | None = None
    if max_bytes != "default":
        if not max_bytes.isdigit() or int(max_bytes) <= 0:
            fail("BYTES must be a positive whole number of bytes, or `default`", 2)
        value = int(max_bytes)
    settings = settings_for(ctx.obj["config_file"], data_dir=ctx.obj["data_dir"])
    shown = run(settings, lambda rt: creds.set_response_cap(rt, slug, value, project=project))
    click.echo(f"{project}/{slug}: responses capped at {shown['effective']} bytes")
