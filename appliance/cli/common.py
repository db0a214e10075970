"""What every ``toolspoke`` command shares: the click group, common options, settings and exits.

Exit codes: 0 success, 1 the operation failed (bad spec, unknown tool, upstream error),
2 usage or configuration error. ``--json`` prints machine-readable output on stdout;
messages for people go to stderr.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import click
import orjson

from appliance import config
from appliance.errors import ApplianceError, ConfigError

T = TypeVar("T")
DATA_DIR = click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help=config.flag_help("data_dir"),
)
CONFIG = click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML settings file (also TOOLSPOKE_CONFIG).",
)
JSON_OUT = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def _together(*options: Callable[[Any], Any]) -> Callable[[T], T]:
    def apply(fn: T) -> T:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return apply


# The options of nearly every command: which data directory, which settings, JSON or text.
STORE = _together(DATA_DIR, CONFIG, JSON_OUT)


def settings_for(config_file: str | None = None, **cli: Any) -> config.Settings:
    try:
        return config.load(cli=cli, config_file=config_file)
    except ConfigError as exc:
        fail(exc.public_message, 2)


def emit(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def serving_loop() -> asyncio.AbstractEventLoop:
    """The loop ``serve`` runs on (web/app.py): uvloop where installed, else the stock one."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(
    settings: config.Settings,
    work: Callable[[Any], Awaitable[T]],
    *,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
) -> T:
    """Open the runtime, run one operation, close; ApplianceErrors become exit 1.

    ``loop_factory``: ``serving_loop`` for a long-running face (``stdio``); a one-shot
    command keeps the stock loop (its few calls gain nothing from uvloop)."""
    from appliance.gateway.runtime import Runtime

    async def main() -> T:
        rt = Runtime(settings)
        await rt.open()
        try:
            return await work(rt)
        finally:
            await rt.close()

    from appliance.gateway.data_dir import hold_runner

    try:
        # Shared, while the database is open (all of `stdio`'s life): `restore` is refused
        # meanwhile, and a command started during a restore is refused.
        with hold_runner(settings), asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(main())
    except ConfigError as exc:
        fail(exc.public_message, 2)
    except ApplianceError as exc:
        where = f" ({exc.field})" if exc.field and exc.field not in exc.public_message else ""
        fail(exc.public_message + where, 1)


def operate(data_dir: str | None, config_file: str | None, work: Callable[[Any], Awaitable[T]]) -> T:
    """Load the settings (``--data-dir``, ``--config``), then ``run`` one operation."""
    return run(settings_for(config_file, data_dir=data_dir), work)


def transact(
    data_dir: str | None,
    config_file: str | None,
    op: Callable[[Any], Awaitable[T]],
    *,
    write: bool = True,
) -> T:
    """``operate`` with one database transaction (``write=False``: a read-only one) given to ``op``."""

    async def work(rt: Any) -> T:
        async with rt.db.write() if write else rt.db.read() as conn:
            return await op(conn)

    return operate(data_dir, config_file, work)


def guard(fn: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            fail(exc.public_message, 2)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """toolspoke: an MCP tool gateway. Thousands of tools behind a handful of bridge tools."""


def number(text: str, field: str) -> Any:
    """A number as JSON reads it (so the API's strict rules apply, NaN refused and all)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        fail(f"{field} must be a number, not {text!r}", 2)
    return value
