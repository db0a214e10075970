"""``toolspoke import openapi | catalog | mcp | lore``: bring toolkits into the catalogue."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click

from appliance.cli.common import (
    DATA_DIR,
    JSON_OUT,
    STORE,
    emit,
    fail,
    main,
    operate,
    run,
    settings_for,
)
from appliance.errors import ImportFailed


@main.group(name="import")
def import_() -> None:
    """Import a toolkit from an OpenAPI spec or a tool catalogue."""


def _print_report(report: Any, as_json: bool) -> None:
    data = report.as_dict()
    if as_json:
        emit(data)
        return
    verb = "would import" if data["dry_run"] else ("replaced" if data["replaced"] else "imported")
    click.echo(
        f"{verb} {data['tool_count']} tools into {data['project']}/{data['slug']} in {data['seconds']:.2f}s"
    )
    if data["base_url"]:
        click.echo(f"base URL: {data['base_url']}")
    for tool in data["tools"]:
        if "inferred_from" in tool:  # inferred tools: what each came from, always shown
            where = ", ".join(tool["inferred_from"][:8]) + (" …" if len(tool["inferred_from"]) > 8 else "")
            by_model = [k for k in ("name", "description") if tool.get(f"{k}_from") == "model"]
            where += f"; {' and '.join(by_model)} by the model" if by_model else ""
            click.echo(
                f"  {tool['state']:<8} {tool['kind']:<12} {tool['name']}  {tool['title']}  (from {where})"
            )
        elif data["dry_run"]:
            click.echo(f"  {tool['kind']:<12} {tool['name']}  {tool['title']}")
    for skip in data["skipped"]:
        click.echo(f"skipped {skip['where']}: {skip['reason']}", err=True)
    for note in data["notes"]:
        click.echo(f"note: {note}", err=True)
    documents = data.get("documents")
    if documents:
        click.echo(
            f"documents: {documents['count']} ({documents['chunks']} chunks): "
            + ", ".join(f"{len(documents[k])} {k}" for k in ("added", "changed", "removed", "unchanged"))
        )


def _imported(
    data_dir: str | None, config_file: str | None, as_json: bool, work: Callable[[Any], Awaitable[Any]]
) -> None:
    """Run one import and print its report; a refusal prints its skipped list first."""
    _print_report(operate(data_dir, config_file, _reporting_refusal(work)), as_json)


def _reporting_refusal(work: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
    """An import refused for having nothing usable prints its skipped-operations report first,
    so the operator sees why every operation was dropped (the error line follows)."""

    async def wrapped(rt: Any) -> Any:
        try:
            return await work(rt)
        except ImportFailed as exc:
            for conflict in exc.data.get("conflicts", []):
                click.echo(f"conflict in {conflict['tool']}: {conflict['where']}", err=True)
            for listed, verb in (("skipped", "skipped"), ("unreadable", "cannot read")):
                for skip in exc.data.get(listed, []):
                    click.echo(f"{verb} {skip['where']}: {skip['reason']}", err=True)
                more = exc.data.get(f"{listed}_count", 0) - len(exc.data.get(listed, []))
                if more > 0:
                    click.echo(f"... and {more} more {verb}", err=True)
            raise

    return wrapped


@import_.command("openapi")
@click.argument("source")
@click.option("--slug", required=True, help="Toolkit slug: lower-case letters, digits and '-'.")
@click.option("--project", default="default", show_default=True)
@click.option("--base-url", default=None, help="Override the spec's server URL.")
@click.option("--dry-run", is_flag=True, help="Show the tools; store nothing.")
@click.option("--replace", is_flag=True, help="Replace an existing toolkit with this slug.")
@STORE
def import_openapi(
    source: str,
    slug: str,
    project: str,
    base_url: str | None,
    dry_run: bool,
    replace: bool,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Import an OpenAPI 3.x or Swagger 2.0 spec from a file or an http(s) URL."""
    from appliance.gateway import imports

    _imported(
        data_dir,
        config_file,
        as_json,
        lambda rt: imports.import_openapi(
            rt, source, slug=slug, project=project, base_url=base_url, dry_run=dry_run, replace=replace
        ),
    )


@import_.command("catalog")
@click.argument("source")
@click.option("--slug", required=True)
@click.option("--project", default="default", show_default=True)
@click.option("--dry-run", is_flag=True)
@click.option("--replace", is_flag=True)
@STORE
def import_catalog(
    source: str,
    slug: str,
    project: str,
    dry_run: bool,
    replace: bool,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Import tool definitions (JSONL: toolkit, name, description, input_schema) for search only."""
    from appliance.gateway import imports

    _imported(
        data_dir,
        config_file,
        as_json,
        lambda rt: imports.import_catalog(
            rt, source, slug=slug, project=project, dry_run=dry_run, replace=replace
        ),
    )


@import_.command("lore")
@click.argument("source")
@click.option("--slug", required=True, help="Toolkit slug: lower-case letters, digits and '-'.")
@click.option("--project", default="default", show_default=True)
@click.option("--dry-run", is_flag=True, help="Read and report the documents; store nothing.")
@click.option(
    "--skip-unreadable", is_flag=True, help="Store the readable documents; list the others in the report."
)
@STORE
def import_lore(
    source: str,
    slug: str,
    project: str,
    dry_run: bool,
    skip_unreadable: bool,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Import a knowledge base (a folder, .zip or .tar.gz of Markdown, text, HTML and PDF) as a
    Lore toolkit; importing again over the same slug updates it in place."""
    from appliance.gateway import lore

    _imported(
        data_dir,
        config_file,
        as_json,
        lambda rt: lore.import_lore(
            rt, source, slug=slug, project=project, dry_run=dry_run, skip_unreadable=skip_unreadable
        ),
    )


@import_.command("examples")
@click.argument("source")
@click.option("--slug", required=True, help="Toolkit slug: lower-case letters, digits and '-'.")
@click.option("--project", default="default", show_default=True)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "curl", "http", "har"]),
    default="auto",
    show_default=True,
    help="curl command lines, raw HTTP request/response pairs, or a HAR file.",
)
@click.option("--base-url", default=None, help="The API's base URL (else the examples' own origin).")
@click.option("--dry-run", is_flag=True, help="Show the inferred tools; store nothing.")
@click.option("--replace", is_flag=True, help="Replace an existing toolkit with this slug.")
@STORE
def import_examples(
    source: str,
    slug: str,
    project: str,
    fmt: str,
    base_url: str | None,
    dry_run: bool,
    replace: bool,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Infer HTTP tools from endpoint examples (a file or an http(s) URL); no spec needed.

    Every inferred tool is stored pending: approve each with 'toolspoke approve SLUG --tool
    NAME'. A credential the examples send (Authorization, X-API-Key, Cookie, ...) is sealed
    in the vault as the toolkit's credential, never a tool input.
    """
    from appliance.gateway import examples_import

    _imported(
        data_dir,
        config_file,
        as_json,
        lambda rt: examples_import.import_examples(
            rt,
            source,
            slug=slug,
            project=project,
            fmt=fmt,
            base_url=base_url,
            dry_run=dry_run,
            replace=replace,
        ),
    )


def _mcp_servers_connection(path: str, server: str | None) -> dict[str, Any]:
    """One server from a ``.mcp.json`` / Claude Desktop ``mcpServers`` block, read as the
    console reads a pasted one (``gateway/admin/imports.mcp_json_connection``)."""
    from appliance.errors import ApplianceError
    from appliance.gateway.admin.imports import mcp_json_connection

    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}", 2)
    try:
        return mcp_json_connection(raw, server, field_name=path)
    except ApplianceError as exc:
        fail(exc.public_message.replace("'server'", "--server"), 2)


@import_.command("mcp", context_settings={"ignore_unknown_options": True})
@click.argument("target", nargs=-1, type=click.UNPROCESSED)
@click.option("--slug", required=True)
@click.option("--project", default="default", show_default=True)
@click.option(
    "--transport", type=click.Choice(["auto", "http", "sse", "stdio"]), default="auto", show_default=True
)
@click.option("--env", "env_pairs", multiple=True, metavar="K=V", help="Environment for a stdio server.")
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="HOST[:PORT]",
    help="stdio: a host its sandbox may reach through the egress guard (*.domain for its subdomains; "
    "port 443 unless given). Default: no network.",
)
@click.option(
    "--config",
    "mcp_config",
    type=click.Path(dir_okay=False),
    default=None,
    help="A .mcp.json / Claude Desktop file with an mcpServers block.",
)
@click.option("--server", default=None, help="Which server of --config (when it lists several).")
@click.option("--dry-run", is_flag=True, help="Connect and list the tools; store nothing.")
@click.option(
    "--require-approval", "approve_new", is_flag=True, help="Store the tools pending until approved."
)
@click.option("--replace", is_flag=True)
@click.option(
    "--bearer-env", metavar="VAR", help="Send 'Authorization: Bearer <$VAR>' (sealed in the vault)."
)
@click.option("--api-key-header", metavar="NAME", help="Send an API key in this header (with --api-key-env).")
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@click.option(
    "--secret-env",
    "secret_env",
    multiple=True,
    metavar="NAME=VAR",
    help="stdio: a vault-held child variable.",
)
@DATA_DIR
@JSON_OUT
def import_mcp(
    target: tuple[str, ...],
    slug: str,
    project: str,
    transport: str,
    env_pairs: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    mcp_config: str | None,
    server: str | None,
    dry_run: bool,
    approve_new: bool,
    replace: bool,
    bearer_env: str | None,
    api_key_header: str | None,
    api_key_env: str | None,
    secret_env: tuple[str, ...],
    data_dir: str | None,
    as_json: bool,
) -> None:
    """Import an MCP server: a URL, a command after --, or an entry of an mcpServers file.

    Credentials go to the vault and are read from environment variables, never from the
    command line: --bearer-env VAR, --api-key-header NAME --api-key-env VAR, or for a stdio
    server --secret-env NAME=VAR (the child sees NAME; --env values are stored in clear).

    \b
    toolspoke import mcp https://mcp.example.com/mcp --slug example
    toolspoke import mcp --slug memory -- npx -y @modelcontextprotocol/server-memory
    toolspoke import mcp --slug fetch --allow-host api.example.com -- uvx mcp-server-fetch
    toolspoke import mcp --config .mcp.json --server memory --slug memory
    """
    from appliance.gateway import imports

    env: dict[str, str] = {}
    for pair in env_pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--env wants KEY=VALUE, got {pair!r}", 2)
        env[key] = value
    url: str | None = None
    command: str | None = None
    args: list[str] = []
    if mcp_config is not None:
        if target:
            fail("give either --config or a URL/command, not both", 2)
        entry = _mcp_servers_connection(mcp_config, server)
        if entry["transport"] != "stdio":
            url = entry["url"]
            transport = entry["transport"] if transport == "auto" else transport
        else:
            command, args, env = entry["command"], entry["args"], {**entry["env"], **env}
    elif len(target) == 1 and target[0].startswith(("http://", "https://")):
        url = target[0]
    elif target:
        command, args = target[0], list(target[1:])
    else:
        fail("give a server URL, a command after --, or --config FILE", 2)
    credential = _credential(bearer_env, api_key_header, api_key_env, secret_env)
    settings = settings_for(None, data_dir=data_dir)

    async def work(rt: Any) -> Any:
        connection = imports.mcp_connection(
            url=url, command=command, args=args, env=env, transport=transport, allow_hosts=allow_hosts
        )
        return await imports.import_mcp(
            rt,
            connection,
            slug=slug,
            project=project,
            dry_run=dry_run,
            replace=replace,
            approve_new=approve_new,
            credential=credential,
        )

    _print_report(run(settings, work), as_json)


def _credential(
    bearer_env: str | None, header: str | None, header_env: str | None, secret_env: tuple[str, ...]
) -> dict[str, Any] | None:
    from appliance.cli.vault import env_secrets, secret_from

    chosen = [bearer_env is not None, header is not None or header_env is not None, bool(secret_env)]
    if sum(chosen) > 1:
        fail("give one credential: --bearer-env, --api-key-header/--api-key-env or --secret-env", 2)
    if bearer_env is not None:
        return {"scheme": "bearer", "token": secret_from(bearer_env, False, what="bearer token")}
    if header is not None or header_env is not None:
        if header is None or header_env is None:
            fail("--api-key-header NAME and --api-key-env VAR go together", 2)
        return {"scheme": "header", "name": header, "value": secret_from(header_env, False, what="API key")}
    if secret_env:
        return {"scheme": "env", "env": env_secrets(secret_env)}
    return None
