"""The running appliance's shared parts: settings, database, egress; opened once, closed once.

``Runtime.parts`` states the order in which they open (and, reversed, close); ``open`` and
``close`` run it, and ``toolspoke serve`` runs the same parts inside its own order
(``gateway/lifecycle.py``).

The web server and the CLI both build one ``Runtime`` and hand it to the gateway's
operations, so a CLI command and an agent's call take exactly the same path.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from appliance import __version__
from appliance.children.processes import ProcessRegistry, StdioPolicy
from appliance.children.sandbox import from_settings as sandbox_from
from appliance.config import Settings, environment_snapshot
from appliance.db import Database
from appliance.db.migrate import default_migrations_dir
from appliance.egress.connect_proxy import ConnectProxy, parse_patterns
from appliance.egress.oauth import TokenCache
from appliance.egress.transport import Egress
from appliance.errors import ConfigError, ImportFailed
from appliance.gateway import demo_api
from appliance.gateway.dataflow import Taints
from appliance.gateway.health_machine import HealthBook, thresholds_from
from appliance.gateway.naming_model import NamingModel
from appliance.gateway.redaction import VaultNeedles
from appliance.gateway.semantic import Semantic
from appliance.gateway.services import Service, Services, at_once
from appliance.gateway.usage import UsageLog
from appliance.ledger.amounts import parse_credits
from appliance.ledger.book import Book
from appliance.ledger.ratelimit import RateLimiter
from appliance.mcpclient.pool import McpPool
from appliance.secret import install_log_redaction
from appliance.vault.keyring import Vault

log = logging.getLogger(__name__)


def prepare_data_dir(settings: Settings) -> bool:
    """Create the data directory (0700). True when it was new.

    The master key file is the vault's business (``vault/keyring.py``): it is created only
    while the vault is empty, and never replaced.
    """
    data = Path(settings.data_dir)
    created = not data.exists()
    data.mkdir(parents=True, exist_ok=True, mode=0o700)
    # The database holds sealed secrets: owner-only, like the key (VAULT-01). SQLite gives
    # its -wal and -shm files the database file's mode, so creating it 0600 covers all three.
    db = settings.db_path
    if not db.exists():
        os.close(os.open(db, os.O_WRONLY | os.O_CREAT, 0o600))
    elif db.stat().st_mode & 0o077:
        db.chmod(0o600)
    return created


def _install_hosts(settings: Settings) -> tuple[str, ...]:
    """The install hosts as patterns, checked once at start-up (config cannot parse them)."""
    try:
        return tuple(str(p) for p in parse_patterns(settings.stdio_install_hosts))
    except ImportFailed as exc:
        raise ConfigError(
            f"TOOLSPOKE_STDIO_INSTALL_HOSTS: {exc.public_message}", field="stdio_install_hosts"
        ) from None


class Runtime:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.db = Database(
            settings.db_path, synchronous=settings.db_synchronous, min_free_bytes=settings.min_free_disk_bytes
        )
        self.egress = Egress(settings)
        sandbox, refusal = sandbox_from(settings)
        self.stdio_policy = StdioPolicy(
            workdir_root=Path(settings.data_dir) / "stdio",
            base_env=environment_snapshot(settings.stdio_inherit_env),
            allowed_executables=settings.stdio_allowed_commands,
            sandbox=sandbox,
            sandbox_refusal=refusal,
            # The sandboxed servers' allowed hosts and package installs, through the guard.
            egress=ConnectProxy(
                self.egress.policy,
                max_connections=settings.stdio_egress_connections,
                idle_s=settings.stdio_egress_idle_s,
                upstream=settings.stdio_egress_upstream_proxy,
            ),
            install_hosts=_install_hosts(settings),
        )
        self.mcp = McpPool(
            self.egress,
            ProcessRegistry(self.stdio_policy),
            stdio_idle_s=settings.stdio_idle_s,
            stdio_start_timeout_s=settings.stdio_start_timeout_s,
            client_info={"name": "toolspoke", "version": __version__},
        )
        self.tokens = TokenCache()  # OAuth access tokens per toolkit (gateway/credentials.py)
        # Each person's OAuth connection in use, by (toolkit id, user id): its tokens, refreshed
        # and sealed again as they change (gateway/connections.py).
        self.user_oauth: dict[tuple[int, int], Any] = {}
        self.oauth_registered: dict[str, Any] = {}  # clients registered (RFC 7591) per issuer
        self.health = HealthBook(thresholds_from(settings))  # fed by gateway/health.py
        self.self_base_url: str | None = None  # set by `serve` once the port is bound
        # The demo API's notes, answered in process at its reserved origin (gateway/demo_api.py):
        # every process that makes calls serves the demo itself, with no address opened.
        self.demo_notes = demo_api.NoteStore()
        if settings.demo:
            self.egress.serve_locally(demo_api.ORIGIN, self.demo_notes.answer)
        # spend and accounting (gateway/accounting.py): the book, and one limiter per kind of call
        self.book = Book(
            self.db,
            default_fee=parse_credits(settings.default_fee, "default_fee"),
            audit_retention_s=settings.audit_retention_days * 86400,
        )
        # which search result a caller then called (gateway/usage.py): written beside the book's rows
        self.usage = UsageLog(settings, self.book)
        # each agent's recent private and untrusted reads, for the data-flow guard (in memory)
        self.taints = Taints()
        self.call_limiter = RateLimiter(settings.rate_limit, settings.rate_limit_window_s)
        self.browse_limiter = RateLimiter(settings.browse_rate_limit, settings.rate_limit_window_s)
        # Tool-call attempts between their start and their audit row's acknowledgement
        # (gateway/pipeline.py): a lone one's row commits on the loop (Book.record's `alone`).
        self.calls_in_flight = 0
        # script runs at once (gateway/code_runs.py): each holds a thread until its script ends
        self.code_slots = asyncio.Semaphore(settings.code_runs_at_once)
        self._vault: Vault | None = None
        self._parts: Services | None = None  # what open() started, for close()
        # every vault secret's forms, for whatever upstream text comes back (gateway/redaction.py)
        self.redaction = VaultNeedles()
        install_log_redaction()
        self.semantic = Semantic(settings)  # embedding provider, breaker, search counters
        # The chat model that names inferred tools (None: off); a half-configured one stops here.
        self.naming_model = NamingModel.from_settings(settings)

    @property
    def vault(self) -> Vault:
        assert self._vault is not None, "the runtime is not open"
        return self._vault

    def parts(self, migrations_dir: Path | None = None) -> tuple[Service, ...]:
        """The runtime's parts in the order they open; they close in reverse (``Services``)."""
        return (
            Service("database", lambda: self._open_database(migrations_dir), self.db.close),
            # A missing, malformed or wrong master key stops here, before anything is served.
            Service("vault", self._open_vault),
            # A half-configured provider stops start-up, naming the setting.
            Service("semantic search", at_once(lambda: self.semantic.provider), self.semantic.aclose),
            # Queued audit rows and charges are flushed before the database closes.
            Service("ledger", stop=self.book.aclose),
            # Open searches settle as misses and ride the book's last batch, before it stops.
            Service("search usage log", stop=self.usage.aclose),
            Service("egress", stop=self.egress.aclose),
            # Children first: no stdio upstream may outlive the gateway.
            Service("MCP sessions and stdio children", stop=self.mcp.aclose),
        )

    async def _open_database(self, migrations_dir: Path | None) -> None:
        prepare_data_dir(self.settings)
        await self.db.open(migrations_dir or default_migrations_dir())

    async def _open_vault(self) -> None:
        self._vault = await Vault.open(self.db, self.settings)

    async def open(self, migrations_dir: Path | None = None) -> None:
        """Open every part (``parts``); one that fails closes those already open."""
        self._parts = Services(self.parts(migrations_dir))
        await self._parts.start()

    async def close(self) -> None:
        if self._parts is not None:
            await self._parts.stop()
