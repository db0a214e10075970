"""At DEBUG, no SQL statement and none of its parameters reach the log (sealed vault blobs
included): aiosqlite logs every call it runs, with its arguments, at DEBUG."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from appliance import config
from appliance.db import dumps
from appliance.gateway import demo_api
from appliance.gateway.credentials import set_credential
from appliance.gateway.imports import import_openapi
from appliance.gateway.runtime import Runtime

TOKEN = "canary-token-5f0c9e2b7a1d"


def test_debug_logging_carries_no_sql_parameters_or_ciphertext(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = dumps(demo_api.openapi_spec("https://notes.example")).encode()
    settings = config.load(cli={"data_dir": str(tmp_path / "data"), "log_level": "DEBUG"}, env={})
    caplog.set_level(logging.DEBUG)  # the root logger at DEBUG, as `serve` sets it

    async def main() -> bytes:
        rt = Runtime(settings)
        await rt.open()
        try:
            await import_openapi(rt, "builtin:demo", slug="kit", data=spec)
            await set_credential(rt, "kit", {"scheme": "bearer", "token": TOKEN})
            async with rt.db.read() as conn:
                row = await conn.one("SELECT blob FROM secrets")
            assert row is not None
            return bytes(row[0])
        finally:
            await rt.close()

    sealed = asyncio.run(main())
    text = caplog.text
    assert TOKEN not in text
    assert repr(sealed)[2:40] not in text, "a sealed vault blob reached the log"
    assert sealed.hex()[:32] not in text
    for statement in ("INSERT INTO", "SELECT ", "UPDATE ", "executing"):
        assert statement not in text, f"{statement!r} in the DEBUG log"
