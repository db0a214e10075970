"""``GET /api/v1/backup``: the live database's consistent copy, downloaded (admins; CRASH-06).

The same copy as ``toolspoke backup`` (``db/backup.py``: ``VACUUM INTO``, checked), written
to a 0600 file in the data directory, opened, removed (so no name is left behind even if the
client goes away), and streamed from the open file. Copies are made one at a time: a second
request waits for the first copy to be made.

A backup copy never outlives its request. A client that goes away while its copy is being
made cancels the handler, but not the thread making the copy (a thread cannot be stopped):
the copy would land after the handler had gone, and stay. So the handler keeps the lock
until the thread is done and the copy is removed then, whatever the client did (30 quick
disconnects once left 23 full copies). A copy or partial copy left by a process that died
while making one is removed when ``serve`` starts (only one ``serve`` runs per data
directory, so nobody else can be making one then).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

from sanic import Blueprint, Request, Sanic
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError
from appliance.gateway.data_dir import copy_for_download, remove_leftovers
from appliance.web.admin_routes import admin_only, error_response

bp = Blueprint("admin_backup", url_prefix="/api/v1")
bp.on_request(admin_only)
CHUNK = 1024 * 1024
MEDIA_TYPE = "application/vnd.sqlite3"
PREFIX = ".download-"  # the copies' names: ``.download-<random>.db`` in the data directory


@bp.get("/backup")
async def download(request: Request) -> HTTPResponse | None:
    settings = request.app.ctx.rt.settings
    copy = Path(settings.data_dir) / f"{PREFIX}{secrets.token_hex(8)}.db"
    try:
        report = await copy_for_download(request.app.ctx.backup_lock, settings, copy)
    except ApplianceError as exc:
        return error_response(exc)
    try:
        f = copy.open("rb")
    finally:
        copy.unlink(missing_ok=True)  # the open file stays readable; no name is left behind
    with f:
        name = time.strftime("toolspoke-%Y%m%dT%H%M%SZ.db", time.gmtime())
        sent = await request.respond(
            content_type=MEDIA_TYPE,
            headers={
                "Content-Disposition": f'attachment; filename="{name}"',
                "Content-Length": str(report.bytes),
                "Cache-Control": "no-store",
            },
        )
        while chunk := await asyncio.to_thread(f.read, CHUNK):
            await sent.send(chunk)
        await sent.eof()
    return None


def prepare(app: Sanic) -> None:
    """Before the first request (the face's own state, gateway/lifecycle.py)."""
    app.ctx.backup_lock = asyncio.Lock()
    # Left by a process that died while making or sending one: nobody else can be now.
    remove_leftovers(Path(app.ctx.settings.data_dir), PREFIX)
