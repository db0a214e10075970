"""The running appliance's shared parts: settings, database, egress; opened once, closed once.

The web server and the CLI both build one ``Runtime`` and hand it to the gateway's
operations, so a CLI command and an agent's call take exactly the same path.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from appliance import __version__
from appliance.config import Settings, environment_snapshot
from appliance.db import Database
from appliance.db.migrate import default_migrations_dir
from appliance.errors import ConfigError
from appliance.upstream.health import HealthBook, thresholds_from
from appliance.upstream.mcp_pool import McpPool
from appliance.upstream.processes import ProcessRegistry, StdioPolicy
from appliance.upstream.transport import Egress

log = logging.getLogger(__name__)


def prepare_data_dir(settings: Settings) -> bool:
    """Create the data directory and the master key file (0600). True when it was new.

    The key file is written once and never replaced: replacing it would make every stored
    secret unreadable, so an unreadable or malformed key stops start-up instead.
    """
    data = Path(settings.data_dir)
    created = not data.exists()
    data.mkdir(parents=True, exist_ok=True, mode=0o700)
    key_path = settings.master_key_path
    if not key_path.exists():
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
    else:
        try:
            text = key_path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read master key file {key_path}: {exc.strerror}") from None
        if len(text) != 64 or any(c not in "0123456789abcdef" for c in text.lower()):
            raise ConfigError(f"master key file {key_path} is malformed (expected 64 hex characters)")
        if key_path.stat().st_mode & 0o077:
            log.warning("master key file %s is readable by others; chmod 600 it", key_path)
    return created


class Runtime:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.db = Database(settings.db_path)
        self.egress = Egress(settings)
        self.stdio_policy = StdioPolicy(
            workdir_root=Path(settings.data_dir) / "stdio",
            base_env=environment_snapshot(settings.stdio_inherit_env),
            allowed_executables=settings.stdio_allowed_commands,
        )
        self.mcp = McpPool(
            self.egress,
            ProcessRegistry(self.stdio_policy),
            stdio_idle_s=settings.stdio_idle_s,
            stdio_start_timeout_s=settings.stdio_start_timeout_s,
            client_info={"name": "toolspoke", "version": __version__},
        )
        self.health = HealthBook(thresholds_from(settings))  # fed by gateway/health.py
        self.self_base_url: str | None = None  # set by `serve` once the port is bound

    async def open(self, migrations_dir: Path | None = None) -> None:
        prepare_data_dir(self.settings)
        await self.db.open(migrations_dir or default_migrations_dir())

    async def close(self) -> None:
        # Children first: no stdio upstream may outlive the gateway.
        await self.mcp.aclose()
        await self.egress.aclose()
        await self.db.close()
