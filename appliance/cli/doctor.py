"""``toolspoke doctor``: report what this machine offers (the stdio sandbox) and the verdict."""

from __future__ import annotations

import click

from appliance.cli.common import CONFIG, DATA_DIR, JSON_OUT, emit, main, settings_for


@main.command()
@DATA_DIR
@CONFIG
@JSON_OUT
@click.option("--strict", is_flag=True, help="Exit 1 unless stdio servers would run sandboxed.")
def doctor(data_dir: str | None, config_file: str | None, as_json: bool, strict: bool) -> None:
    """Check the stdio sandbox: bubblewrap, the limits, and what a stdio server will get."""
    from appliance.gateway.doctor import report

    found = report(settings_for(config_file, data_dir=data_dir))
    box = found["stdio_sandbox"]
    if as_json:
        emit(found)
    else:
        verdicts = {
            "sandboxed": "stdio servers run sandboxed",
            "unsandboxed": "stdio servers run WITHOUT a sandbox (mode auto)",
            "refused": "stdio servers are REFUSED (mode require, no sandbox)",
            "off": "stdio servers run as plain processes (mode off)",
        }
        click.echo(f"stdio sandbox: {verdicts[box['stdio_servers']]}")
        click.echo(f"  mode:     {box['mode']}")
        click.echo(f"  found:    {box['detail']}")
        for tool in ("bwrap", "prlimit", "setpriv"):
            click.echo(f"  {tool + ':':9} {box[tool] or 'missing'}")
        click.echo(f"  runs as:  {box['uids']}")
        click.echo(f"  network:  {box['network']}")
        proxy = box["egress_proxy"]
        click.echo(f"  allowed hosts: {proxy['allowed_hosts']} (through the egress guard)")
        click.echo(f"  installs reach: {', '.join(proxy['install_hosts']) or 'nothing'}")
        click.echo(f"  upstream proxy: {proxy['upstream_proxy']}")
        limits = ", ".join(f"{k} {v or 'unlimited'}" for k, v in box["limits"].items())
        click.echo(f"  limits:   {limits}")
        disk = box["disk"]
        click.echo(
            f"  disk:     {disk['bound']} ({disk['megabytes_each']} MiB each; possible: {disk['possible']})"
        )
        click.echo(f"  reads:    system directories{''.join(', ' + p for p in box['read_paths'])}")
        if box["hint"]:
            click.echo(f"  to fix:   {box['hint']}")
    if strict and box["stdio_servers"] != "sandboxed":
        raise SystemExit(1)
