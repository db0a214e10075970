"""Commands that start or prepare the appliance: serve, stdio, init, version."""

from __future__ import annotations

import gc
import logging
import sys
from typing import TYPE_CHECKING, Any

import click

from appliance import __version__
from appliance.cli.common import CONFIG, DATA_DIR, fail, guard, main, run, serving_loop, settings_for
from appliance.config import flag_help
from appliance.errors import ApplianceError, ConfigError

if TYPE_CHECKING:
    from appliance.gateway.data_dir import Held


@main.command()
def version() -> None:
    """Print the version."""
    click.echo(f"toolspoke {__version__}")


@main.command()
@click.option("--host", default=None, help=flag_help("host"))
@click.option("--port", type=int, default=None, help=flag_help("port"))
@DATA_DIR
@CONFIG
@guard
def serve(host: str | None, port: int | None, data_dir: str | None, config_file: str | None) -> None:
    """Serve the MCP endpoint (/mcp), the admin API and the demo toolkit."""
    from appliance.gateway.runtime import prepare_data_dir
    from appliance.web.app import create_app, listen_socket
    from appliance.web.connections import GuardedProtocol

    settings = settings_for(config_file, host=host, port=port, data_dir=data_dir)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    held = _hold_serving(settings)  # for the process's lifetime: kill -9 drops them
    prepare_data_dir(settings)
    # Open the database and the vault once before binding: a missing, malformed or wrong
    # master key (or a database that cannot open) exits 2 here with its message.
    run(settings, _check_sound)
    try:
        sock = listen_socket(settings.host, settings.port)
    except OSError as exc:
        fail(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror}", 1)
    app = create_app(settings)
    app.ctx.bound_address = sock.getsockname()[:2]
    app.ctx.listen_socket = sock  # closed to new connections first thing at SIGTERM
    app.run(sock=sock, single_process=True, access_log=False, motd=False, protocol=GuardedProtocol)
    for lock in held:
        lock.release()
    _leaving()


def _hold_serving(settings: Any) -> list[Held]:
    """The runner's shared hold (keeps `restore` away) and the one-serve-per-data-dir lock."""
    from appliance.gateway.data_dir import hold_serving

    try:
        return hold_serving(settings)
    except ApplianceError as exc:
        fail(exc.public_message, 2 if isinstance(exc, ConfigError) else 1)


async def _check_sound(rt: Any) -> None:
    from appliance.gateway.readiness import check_sound

    await check_sound(rt)  # a damaged database stops here, before anything is served


@main.command()
@DATA_DIR
@CONFIG
def init(data_dir: str | None, config_file: str | None) -> None:
    """Create the data directory and print an admin API key, once."""
    from appliance.gateway.admin import keys

    settings = settings_for(config_file, data_dir=data_dir)
    given = settings.admin_key.reveal() if settings.admin_key is not None else None
    if given is not None:
        try:
            keys.check_admin_key(given)
        except ApplianceError as exc:
            # A configuration error (exit 2), caught before anything is created or installed.
            fail(f"TOOLSPOKE_ADMIN_KEY (setting admin_key) is malformed: {exc.public_message}", 2)

    async def work(rt: Any) -> str | None:
        from appliance.gateway.imports import ensure_demo

        await ensure_demo(rt)  # the demo works on every face from the start, no serve needed
        return await keys.first_admin_key(rt, given)

    key = run(settings, work)
    if key is None:
        click.echo(
            f"toolspoke is already initialised in {settings.data_dir}; its admin key was shown once.",
            err=True,
        )
        return
    click.echo(f"Initialised {settings.data_dir}", err=True)
    if given:
        click.echo("Installed the admin key from TOOLSPOKE_ADMIN_KEY.", err=True)
    else:
        click.echo("Admin API key (shown once; store it now):", err=True)
        click.echo(key)


@main.command()
@DATA_DIR
@CONFIG
@guard
def stdio(data_dir: str | None, config_file: str | None) -> None:
    """Serve the bridge over stdio for desktop MCP clients (key from TOOLSPOKE_API_KEY)."""
    from appliance.web.stdio import serve_stdio

    settings = settings_for(config_file, data_dir=data_dir)
    # stdout carries MCP messages only; every log line goes to stderr.
    logging.basicConfig(
        level=settings.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not settings.api_key:
        fail("toolspoke stdio needs an API key in TOOLSPOKE_API_KEY", 2)
    key = settings.api_key.reveal()  # checked against the stored hashes on every request

    async def work(rt: Any) -> None:
        from appliance.gateway.imports import ensure_demo

        await ensure_demo(rt)  # a data directory that predates the in-process demo
        await serve_stdio(rt, key)

    run(settings, work, loop_factory=serving_loop)  # as serve's
    _leaving()


def _leaving() -> None:
    """A face that has stopped serving: everything is closed and the process is about to exit.

    The interpreter's teardown ends with a garbage collection that walks every object the
    server made, about a second after ``Server Stopped`` at a demo's size, longer with a big
    catalogue. Frozen, they go with the process instead; finalizers and atexit handlers still
    run. Only here, where the process ends: frozen objects are never collected."""
    gc.freeze()
