"""``GET /api/v1/backup``: the live database's consistent copy, downloaded (admins; CRASH-06).

The same copy as ``toolspoke backup`` (``db/backup.py``: ``VACUUM INTO``, checked), written
to a 0600 file in the data directory, opened, removed (so no name is left behind even if the
client goes away), and streamed from the open file. Copies are made one at a time: a second
request waits for the first copy to be made.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

from sanic import Blueprint, Request, Sanic
from sanic.response import HTTPResponse

from appliance.db.backup import backup
from appliance.errors import ApplianceError
from appliance.web.admin_routes import admin_only, error_response

bp = Blueprint("admin_backup", url_prefix="/api/v1")
bp.on_request(admin_only)
CHUNK = 1024 * 1024
MEDIA_TYPE = "application/vnd.sqlite3"


@bp.get("/backup")
async def download(request: Request) -> HTTPResponse | None:
    settings = request.app.ctx.rt.settings
    copy = Path(settings.data_dir) / f".download-{secrets.token_hex(8)}.db"
    lock: asyncio.Lock = request.app.ctx.backup_lock
    try:
        async with lock:
            report = await asyncio.to_thread(backup, settings.db_path, copy)
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


@bp.before_server_start
async def _start(app: Sanic) -> None:
    app.ctx.backup_lock = asyncio.Lock()
