"""The ``toolspoke`` command. Thin: parses, builds Settings, calls the gateway or the web app.

Exit codes: 0 success, 1 the operation failed (bad spec, unknown tool, upstream error),
2 usage or configuration error. ``--json`` prints machine-readable output on stdout;
messages for people go to stderr.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson

from appliance import __version__, config
from appliance.errors import ApplianceError, ConfigError

T = TypeVar("T")
_DATA_DIR = click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Data directory (also TOOLSPOKE_DATA_DIR).",
)
_CONFIG = click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML settings file (also TOOLSPOKE_CONFIG).",
)
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def _settings(config_file: str | None = None, **cli: Any) -> config.Settings:
    try:
        return config.load(cli=cli, config_file=config_file)
    except ConfigError as exc:
        _fail(exc.public_message, 2)
    raise AssertionError("unreachable")


def _emit(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def _fail(message: str, code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _run(settings: config.Settings, work: Callable[[Any], Awaitable[T]]) -> T:
    """Open the runtime, run one operation, close; ApplianceErrors become exit 1."""
    from appliance.gateway.runtime import Runtime

    async def main() -> T:
        rt = Runtime(settings)
        await rt.open()
        try:
            return await work(rt)
        finally:
            await rt.close()

    try:
        return asyncio.run(main())
    except ConfigError as exc:
        _fail(exc.public_message, 2)
    except ApplianceError as exc:
        where = f" ({exc.field})" if exc.field and exc.field not in exc.public_message else ""
        _fail(exc.public_message + where, 1)
    raise AssertionError("unreachable")


def _guard(fn: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            _fail(exc.public_message, 2)
        raise AssertionError("unreachable")

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """toolspoke: an MCP tool gateway. Thousands of tools behind a handful of bridge tools."""


@main.command()
def version() -> None:
    """Print the version."""
    click.echo(f"toolspoke {__version__}")


@main.command()
@click.option("--host", default=None, help="Bind address (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default 8765; 0 picks a free one).")
@_DATA_DIR
@_CONFIG
@_guard
def serve(host: str | None, port: int | None, data_dir: str | None, config_file: str | None) -> None:
    """Serve the MCP endpoint (/mcp), the admin API and the demo toolkit."""
    from appliance.gateway.runtime import prepare_data_dir
    from appliance.web.app import create_app, listen_socket

    settings = _settings(config_file, host=host, port=port, data_dir=data_dir)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    prepare_data_dir(settings)
    try:
        sock = listen_socket(settings.host, settings.port)
    except OSError as exc:
        _fail(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror}", 1)
    app = create_app(settings)
    app.ctx.bound_address = sock.getsockname()[:2]
    app.run(sock=sock, single_process=True, access_log=False, motd=False)


@main.command()
@_DATA_DIR
@_CONFIG
def init(data_dir: str | None, config_file: str | None) -> None:
    """Create the data directory and print an admin API key, once."""
    from appliance.access import keys

    settings = _settings(config_file, data_dir=data_dir)
    if settings.admin_key is not None:
        try:
            keys.check_format(settings.admin_key)
        except ApplianceError as exc:
            # A configuration error (exit 2), caught before anything is created or installed.
            _fail(f"TOOLSPOKE_ADMIN_KEY (setting admin_key) is malformed: {exc.public_message}", 2)

    async def work(rt: Any) -> str | None:
        async with rt.db.read() as conn:
            if await keys.has_admin_key(conn):
                return None
        key = settings.admin_key or keys.new_key()
        async with rt.db.write() as tx:
            user = await keys.ensure_admin(tx)
            await keys.add_key(tx, user, key, name="init")
        return key

    key = _run(settings, work)
    if key is None:
        click.echo(
            f"toolspoke is already initialised in {settings.data_dir}; its admin key was shown once.",
            err=True,
        )
        return
    click.echo(f"Initialised {settings.data_dir}", err=True)
    if settings.admin_key:
        click.echo("Installed the admin key from TOOLSPOKE_ADMIN_KEY.", err=True)
    else:
        click.echo("Admin API key (shown once; store it now):", err=True)
        click.echo(key)


@main.group(name="import")
def import_() -> None:
    """Import a toolkit from an OpenAPI spec or a tool catalogue."""


def _print_report(report: Any, as_json: bool) -> None:
    data = report.as_dict()
    if as_json:
        _emit(data)
        return
    verb = "would import" if data["dry_run"] else ("replaced" if data["replaced"] else "imported")
    click.echo(
        f"{verb} {data['tool_count']} tools into {data['project']}/{data['slug']} in {data['seconds']:.2f}s"
    )
    if data["base_url"]:
        click.echo(f"base URL: {data['base_url']}")
    if data["dry_run"]:
        for tool in data["tools"]:
            click.echo(f"  {tool['kind']:<12} {tool['name']}  {tool['title']}")
    for skip in data["skipped"]:
        click.echo(f"skipped {skip['where']}: {skip['reason']}", err=True)
    for note in data["notes"]:
        click.echo(f"note: {note}", err=True)


@import_.command("openapi")
@click.argument("source")
@click.option("--slug", required=True, help="Toolkit slug: lower-case letters, digits and '-'.")
@click.option("--project", default="default", show_default=True)
@click.option("--base-url", default=None, help="Override the spec's server URL.")
@click.option("--dry-run", is_flag=True, help="Show the tools; store nothing.")
@click.option("--replace", is_flag=True, help="Replace an existing toolkit with this slug.")
@_DATA_DIR
@_CONFIG
@_JSON
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

    settings = _settings(config_file, data_dir=data_dir)
    report = _run(
        settings,
        lambda rt: imports.import_openapi(
            rt, source, slug=slug, project=project, base_url=base_url, dry_run=dry_run, replace=replace
        ),
    )
    _print_report(report, as_json)


@import_.command("catalog")
@click.argument("source")
@click.option("--slug", required=True)
@click.option("--project", default="default", show_default=True)
@click.option("--dry-run", is_flag=True)
@click.option("--replace", is_flag=True)
@_DATA_DIR
@_CONFIG
@_JSON
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

    settings = _settings(config_file, data_dir=data_dir)
    report = _run(
        settings,
        lambda rt: imports.import_catalog(
            rt, source, slug=slug, project=project, dry_run=dry_run, replace=replace
        ),
    )
    _print_report(report, as_json)


def _mcp_servers_entry(path: str, server: str | None) -> dict[str, Any]:
    """One server from a ``.mcp.json`` / Claude Desktop ``mcpServers`` block."""
    try:
        doc = orjson.loads(Path(path).read_bytes())
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror}", 2)
    except orjson.JSONDecodeError as exc:
        _fail(f"{path} is not valid JSON: {exc}", 2)
    servers = doc.get("mcpServers") if isinstance(doc, dict) else None
    if not isinstance(servers, dict) or not servers:
        _fail(f"{path} has no 'mcpServers' object", 2)
    assert isinstance(servers, dict)
    if server is None:
        if len(servers) != 1:
            _fail(f"{path} lists several servers ({', '.join(servers)}); pick one with --server", 2)
        server = next(iter(servers))
    entry = servers.get(server)
    if not isinstance(entry, dict):
        _fail(f"{path} has no server named {server!r}", 2)
    assert isinstance(entry, dict)
    return entry


@import_.command("mcp", context_settings={"ignore_unknown_options": True})
@click.argument("target", nargs=-1, type=click.UNPROCESSED)
@click.option("--slug", required=True)
@click.option("--project", default="default", show_default=True)
@click.option(
    "--transport", type=click.Choice(["auto", "http", "sse", "stdio"]), default="auto", show_default=True
)
@click.option("--env", "env_pairs", multiple=True, metavar="K=V", help="Environment for a stdio server.")
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
@_DATA_DIR
@_JSON
def import_mcp(
    target: tuple[str, ...],
    slug: str,
    project: str,
    transport: str,
    env_pairs: tuple[str, ...],
    mcp_config: str | None,
    server: str | None,
    dry_run: bool,
    approve_new: bool,
    replace: bool,
    data_dir: str | None,
    as_json: bool,
) -> None:
    """Import an MCP server: a URL, a command after --, or an entry of an mcpServers file.

    \b
    toolspoke import mcp https://mcp.example.com/mcp --slug example
    toolspoke import mcp --slug memory -- npx -y @modelcontextprotocol/server-memory
    toolspoke import mcp --config .mcp.json --server memory --slug memory
    """
    from appliance.gateway import imports

    env: dict[str, str] = {}
    for pair in env_pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            _fail(f"--env wants KEY=VALUE, got {pair!r}", 2)
        env[key] = value
    url: str | None = None
    command: str | None = None
    args: list[str] = []
    if mcp_config is not None:
        if target:
            _fail("give either --config or a URL/command, not both", 2)
        entry = _mcp_servers_entry(mcp_config, server)
        if isinstance(entry.get("url"), str):
            url = entry["url"]
            if transport == "auto" and entry.get("type") in ("sse", "http"):
                transport = str(entry["type"])
        else:
            command = entry.get("command") if isinstance(entry.get("command"), str) else None
            raw_args = entry.get("args") or []
            args = [str(a) for a in raw_args] if isinstance(raw_args, list) else []
            raw_env = entry.get("env") or {}
            env = (
                {**{str(k): str(v) for k, v in raw_env.items()}, **env} if isinstance(raw_env, dict) else env
            )
            if command is None:
                _fail(f"server entry in {mcp_config} has neither 'url' nor 'command'", 2)
    elif len(target) == 1 and target[0].startswith(("http://", "https://")):
        url = target[0]
    elif target:
        command, args = target[0], list(target[1:])
    else:
        _fail("give a server URL, a command after --, or --config FILE", 2)
    settings = _settings(None, data_dir=data_dir)

    async def work(rt: Any) -> Any:
        connection = imports.mcp_connection(url=url, command=command, args=args, env=env, transport=transport)
        return await imports.import_mcp(
            rt,
            connection,
            slug=slug,
            project=project,
            dry_run=dry_run,
            replace=replace,
            approve_new=approve_new,
        )

    _print_report(_run(settings, work), as_json)


@main.group(invoke_without_command=True)
@click.option("--project", default=None)
@_DATA_DIR
@_CONFIG
@_JSON
@click.pass_context
def toolkits(
    ctx: click.Context, project: str | None, data_dir: str | None, config_file: str | None, as_json: bool
) -> None:
    """List toolkits (or use a subcommand)."""
    ctx.obj = {"data_dir": data_dir, "config_file": config_file}
    if ctx.invoked_subcommand is not None:
        return
    from appliance.catalogue import store

    async def work(rt: Any) -> Any:
        async with rt.db.read() as conn:
            return await store.list_toolkits(conn, project=project)

    kits = _run(_settings(config_file, data_dir=data_dir), work)
    if as_json:
        _emit(
            [
                {
                    "slug": k.slug,
                    "project": k.project,
                    "kind": k.source_kind,
                    "title": k.title,
                    "tools": k.tool_count,
                    "base_url": k.base_url,
                    "source": k.source,
                }
                for k in kits
            ]
        )
        return
    if not kits:
        click.echo("no toolkits yet; import one with `toolspoke import openapi SPEC --slug NAME`", err=True)
    for k in kits:
        click.echo(f"{k.project}/{k.slug:<24} {k.source_kind:<8} {k.tool_count:>6} tools  {k.title}")


@toolkits.command("remove")
@click.argument("slug")
@click.option("--project", default="default", show_default=True)
@click.pass_context
def toolkits_remove(ctx: click.Context, slug: str, project: str) -> None:
    """Remove a toolkit and its tools."""
    from appliance.gateway import imports

    settings = _settings(ctx.obj["config_file"], data_dir=ctx.obj["data_dir"])
    removed = _run(settings, lambda rt: imports.remove_toolkit(rt, slug, project=project))
    click.echo(f"removed {project}/{slug} ({removed} tools)")


@main.command()
@click.argument("query")
@click.option("--toolkit", default=None)
@click.option("--project", default=None)
@click.option("--limit", type=click.IntRange(1, 100), default=None)
@_DATA_DIR
@_CONFIG
@_JSON
def search(
    query: str,
    toolkit: str | None,
    project: str | None,
    limit: int | None,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Search tools the way an agent's search_tools does."""
    from appliance.gateway.bridge import describe
    from appliance.gateway.searching import search_tools

    settings = _settings(config_file, data_dir=data_dir)
    tools, ranking = _run(
        settings,
        lambda rt: search_tools(rt, query, toolkit=toolkit, project=project, limit=limit, max_limit=100),
    )
    if as_json:
        _emit({"results": [describe(t) for t in tools], "ranking": ranking})
        return
    if not tools:
        click.echo("no matching tools", err=True)
    for t in tools:
        click.echo(f"{t.name:<48} {t.kind:<11} {(t.description or t.title)[:80]}")


@main.command()
@click.argument("tool")
@click.option("--input", "input_json", default="{}", help="Arguments as a JSON object.")
@click.option("--project", default=None)
@_DATA_DIR
@_CONFIG
@_JSON
def call(
    tool: str,
    input_json: str,
    project: str | None,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Call a tool by its exact name, as the local operator."""
    from appliance.gateway.calls import call_tool
    from appliance.models import Principal

    try:
        arguments = orjson.loads(input_json)
    except orjson.JSONDecodeError as exc:
        _fail(f"--input is not valid JSON: {exc}", 2)
    if not isinstance(arguments, dict):
        _fail("--input must be a JSON object", 2)
    operator = Principal(user_id=0, name="cli", is_admin=True, key_prefix="cli")
    settings = _settings(config_file, data_dir=data_dir)
    result = _run(settings, lambda rt: call_tool(rt, operator, tool, arguments, project=project))
    if as_json:
        _emit(
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
@click.argument("queries", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--limit",
    type=click.IntRange(10, 100),
    default=100,
    show_default=True,
    help="Results per query (MRR looks at this many).",
)
@click.option("--toolkit", default=None)
@click.option("--project", default=None)
@_DATA_DIR
@_CONFIG
@_JSON
def eval_(
    queries: str,
    limit: int,
    toolkit: str | None,
    project: str | None,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Score search on labelled queries (JSONL: id, query, gold): Recall@k, nDCG@10, MRR, latency."""
    from appliance.gateway.evaluation import evaluate, read_queries

    try:
        items = read_queries(Path(queries).read_bytes())
    except ApplianceError as exc:
        _fail(exc.public_message, 2)
    settings = _settings(config_file, data_dir=data_dir)
    started = time.perf_counter()
    summary = _run(settings, lambda rt: evaluate(rt, items, limit=limit, toolkit=toolkit, project=project))
    if as_json:
        _emit(summary)
        return
    click.echo(f"{summary['queries']} queries in {time.perf_counter() - started:.1f}s")
    for key in ("recall@1", "recall@5", "recall@10", "ndcg@10", "mrr"):
        click.echo(f"  {key:<10} {summary[key]:.3f}")
    lat = summary["latency_ms"]
    click.echo(f"  latency    p50 {lat['p50']:.2f} ms  p95 {lat['p95']:.2f} ms  p99 {lat['p99']:.2f} ms")


# -- re-sync, approval, reclassification ------------------------------------------------------


@main.command(name="sync")
@click.argument("slug")
@click.option("--project", default="default", show_default=True)
@_DATA_DIR
@_CONFIG
@_JSON
@_guard
def sync_(slug: str, project: str, data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """Re-sync an MCP toolkit: new tools arrive pending, vanished ones are disabled."""
    from appliance.gateway import sync

    settings = _settings(config_file, data_dir=data_dir)
    report = _run(settings, lambda rt: sync.resync_toolkit(rt, slug, project=project))
    if as_json:
        _emit(report.as_dict())
        return
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
@_DATA_DIR
@_CONFIG
@_JSON
@_guard
def pending(slug: str, project: str, data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """List a toolkit's tools awaiting approval."""
    from appliance.gateway import sync

    settings = _settings(config_file, data_dir=data_dir)
    tools = _run(settings, lambda rt: sync.list_pending(rt, slug, project))
    if as_json:
        _emit({"toolkit": slug, "project": project, "pending": tools})
        return
    for t in tools:
        click.echo(f"{t['name']:<48} {t['kind']:<12} {t['description'][:80]}")
    if not tools:
        click.echo(f"{project}/{slug}: nothing pending")


@main.command()
@click.argument("slug")
@click.option("--tool", "tool_names", multiple=True, metavar="NAME", help="A tool to approve (repeatable).")
@click.option("--all", "approve_all", is_flag=True, help="Approve every pending tool.")
@click.option("--project", default="default", show_default=True)
@_DATA_DIR
@_CONFIG
@_JSON
@_guard
def approve(
    slug: str,
    tool_names: tuple[str, ...],
    approve_all: bool,
    project: str,
    data_dir: str | None,
    config_file: str | None,
    as_json: bool,
) -> None:
    """Approve pending tools so agents can find and call them."""
    from appliance.gateway import sync

    if approve_all == bool(tool_names):
        _fail("give --tool NAME (repeatable) or --all", 2)
    settings = _settings(config_file, data_dir=data_dir)
    chosen = None if approve_all else list(tool_names)
    approved = _run(settings, lambda rt: sync.approve(rt, slug, project=project, tools=chosen))
    if as_json:
        _emit({"toolkit": slug, "project": project, "approved": approved})
        return
    for name in approved:
        click.echo(f"approved {name}")
    if not approved:
        click.echo("nothing to approve")


@main.command()
@click.argument("tool")
@click.argument("kind", type=click.Choice(["read", "write", "destructive", "auto"]))
@click.option("--project", default=None, help="Needed only when the name exists in several projects.")
@_DATA_DIR
@_CONFIG
@_JSON
@_guard
def reclassify(
    tool: str, kind: str, project: str | None, data_dir: str | None, config_file: str | None, as_json: bool
) -> None:
    """Set a tool's kind (it decides the runner agents must use); `auto` returns to the source's."""
    from appliance.gateway import sync

    settings = _settings(config_file, data_dir=data_dir)
    result = _run(settings, lambda rt: sync.reclassify(rt, tool, kind, project=project))
    if as_json:
        _emit(result)
        return
    click.echo(f"{result['project']}/{result['name']}: {result['kind']} (runner {result['runner']})")


@main.command()
@_DATA_DIR
@_CONFIG
@_guard
def stdio(data_dir: str | None, config_file: str | None) -> None:
    """Serve the bridge over stdio for desktop MCP clients (key from TOOLSPOKE_API_KEY)."""
    from appliance.web.stdio import serve_stdio

    settings = _settings(config_file, data_dir=data_dir)
    # stdout carries MCP messages only; every log line goes to stderr.
    logging.basicConfig(
        level=settings.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not settings.api_key:
        _fail("toolspoke stdio needs an API key in TOOLSPOKE_API_KEY", 2)
    assert settings.api_key is not None
    key = settings.api_key
    _run(settings, lambda rt: serve_stdio(rt, key))
