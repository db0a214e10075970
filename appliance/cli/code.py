"""``toolspoke code``: run a script as ``use_code`` (or, with ``--write``, ``run_code``) would.

An operator's way to try a script from a terminal before an agent sends it: the same engine,
limits and pipeline (``gateway/code_runs.py``), as the operator or as ``--key``. The code
tools must be on (``TOOLSPOKE_CODE_TOOLS``), as for agents.
"""

from __future__ import annotations

import sys
from typing import Any

import click
import orjson

from appliance.cli.acting import KEY, acting
from appliance.cli.common import STORE, emit, fail, main, operate


@main.command(name="code")
@click.argument("script", type=click.File("r", encoding="utf-8"))
@click.option(
    "--write", is_flag=True, help="Run as run_code: the script may call write and destructive tools."
)
@KEY
@STORE
def code(
    script: Any, write: bool, key: str | None, data_dir: str | None, config_file: str | None, as_json: bool
) -> None:
    """Run the JavaScript in SCRIPT (a file, or - for standard input) with the code tools."""
    from appliance.gateway import code_runs
    from appliance.gateway.imports import ensure_demo

    try:
        source = script.read()
    except UnicodeDecodeError as exc:
        fail(f"SCRIPT is not UTF-8 text: {exc.reason} at byte {exc.start}", 2)
    if not source.strip():
        fail("SCRIPT is empty", 2)

    async def work(rt: Any) -> Any:
        await ensure_demo(rt)
        tool = "run_code" if write else "use_code"
        return await code_runs.run(rt, await acting(rt, key), tool, {"code": source})

    result = operate(data_dir, config_file, work)
    value = result.structured
    if as_json:
        emit({"structuredContent": value, "isError": result.is_error})
    else:
        for line in value.get("logs", []):
            click.echo(line)
        if result.is_error:
            click.echo(f"error ({value['reason']}): {value['error']}", err=True)
        else:
            click.echo(orjson.dumps(value.get("result"), option=orjson.OPT_INDENT_2).decode())
    if result.is_error:
        sys.exit(1)
