"""Settings, each declared once: defaults < toml file < environment < CLI flags.

A setting is one field of ``Settings``: its name is the TOML key, its annotation the type,
and ``_setting`` gives the environment variable, the default, the parser (bounds included)
and the help text. Everything else derives from that one declaration: ``SETTINGS`` (what
``load`` parses), ``flag_help`` (a command-line flag's help) and the table in
``docs/configuration.md`` (``python -m appliance.config --markdown`` prints it, ``--update
FILE`` rewrites it in place; a test fails when the document is out of step).

This is the only module that reads the environment. ``load`` is called once per process
(by the CLI) and returns a frozen ``Settings``; everything else receives it. Every
credential is a ``Secret``: a repr of the settings, a log line or a traceback shows none.
"""

from __future__ import annotations

import ipaddress
import os
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from appliance.errors import ConfigError
from appliance.secret import Secret


def _bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true/false, got {raw!r}")


def _csv(raw: Any) -> tuple[str, ...]:
    items = [str(x) for x in raw] if isinstance(raw, list | tuple) else str(raw).split(",")
    return tuple(x.strip() for x in items if x.strip())


def _cidrs(raw: Any) -> tuple[str, ...]:
    out = []
    for item in _csv(raw):
        if item in ("*", "0.0.0.0/0", "::/0"):
            # A wildcard would switch the SSRF guard off; name each network instead.
            raise ValueError(f"{item!r} would allow every address; list the networks you mean")
        out.append(str(ipaddress.ip_network(item, strict=False)))
    return tuple(out)


def _abs_paths(raw: Any) -> tuple[str, ...]:
    paths = _csv(raw)
    for path in paths:
        if not os.path.isabs(path) or "\0" in path:
            raise ValueError(f"{path!r} is not an absolute path")
    return tuple(os.path.normpath(p) for p in paths)


def _port(raw: Any) -> int:
    value = int(raw)
    if not 0 <= value <= 65535:
        raise ValueError("must be between 0 and 65535")
    return value


def _positive(kind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def parse(raw: Any) -> Any:
        value = kind(raw)
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value

    return parse


def _non_negative(kind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def parse(raw: Any) -> Any:
        value = kind(raw)
        if value < 0:
            raise ValueError("must be 0 or greater")
        return value

    return parse


def _at_least(floor: float) -> Callable[[Any], float]:
    def parse(raw: Any) -> float:
        value = float(raw)
        if not value >= floor:  # NaN too
            raise ValueError(f"must be at least {floor:g}")
        return value

    return parse


def _secret(raw: Any) -> Secret:
    return Secret(str(raw))


def _stripped_secret(raw: Any) -> Secret:
    return Secret(str(raw).strip())


def _upper(raw: Any) -> str:
    return str(raw).upper()


def _metrics_key(raw: Any) -> Secret:
    value = str(raw).strip()
    if len(value) < 16:  # a guessable key would make the check decoration
        raise ValueError("must be at least 16 characters")
    return Secret(value)


def _synchronous(raw: Any) -> str:
    value = str(raw).strip().upper()
    if value not in ("FULL", "NORMAL"):
        raise ValueError("must be FULL or NORMAL")
    return value


def _choice(*allowed: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        value = str(raw).strip().lower()
        if value not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {raw!r}")
        return value

    return parse


def _default_data_dir() -> str:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "toolspoke")


@dataclass(frozen=True)
class Setting:
    """One setting as ``load`` and the documentation see it (derived from its field)."""

    name: str
    env: str
    default: Any
    parse: Callable[[Any], Any]
    help: str


_DECLARED = "toolspoke.setting"


def _setting(env: str, default: Any, parse: Callable[[Any], Any], help: str) -> Any:
    """The declaration of the field it is assigned to. No dataclass default: ``load`` fills
    every field, so a ``Settings`` built by hand with one missing is an error, not a guess."""
    return field(metadata={_DECLARED: (env, default, parse, help)})


@dataclass(frozen=True)
class Settings:
    # -- where, and who: data, bind address, keys ----------------------------------------------
    data_dir: str = _setting(
        "TOOLSPOKE_DATA_DIR",
        None,
        str,
        "Directory holding the database and the master key file; created on first run (default: "
        "$XDG_DATA_HOME/toolspoke or ~/.local/share/toolspoke).",
    )
    host: str = _setting(
        "TOOLSPOKE_HOST",
        "127.0.0.1",
        str,
        "Address `serve` binds to. Loopback by default; bind wider only behind a proxy you trust.",
    )
    port: int = _setting(
        "TOOLSPOKE_PORT",
        8765,
        _port,
        "TCP port `serve` listens on (0 picks a free port).",
    )
    admin_key: Secret | None = _setting(
        "TOOLSPOKE_ADMIN_KEY",
        None,
        _secret,
        "Admin API key that `init` installs instead of generating one (for automation). Stored hashed; "
        "never printed back.",
    )
    master_key: Secret | None = _setting(
        "TOOLSPOKE_MASTER_KEY",
        None,
        _stripped_secret,
        "The vault's master key (64 hex characters) instead of the `master.key` file in the data dir. "
        "When the vault holds secrets, a missing, malformed or wrong key stops start-up.",
    )
    api_key: Secret | None = _setting(
        "TOOLSPOKE_API_KEY",
        None,
        _secret,
        "The API key `toolspoke stdio` acts with (a desktop client's config passes it in the "
        "environment). Checked on every request, so revoking it takes effect at once.",
    )
    # -- who may reach it, and what it may reach -----------------------------------------------
    allowed_origins: tuple[str, ...] = _setting(
        "TOOLSPOKE_ALLOWED_ORIGINS",
        (),
        _csv,
        "Extra browser origins allowed on the MCP endpoint (comma-separated). Loopback origins are always "
        "allowed; any other Origin gets 403.",
    )
    allowed_hosts: tuple[str, ...] = _setting(
        "TOOLSPOKE_ALLOWED_HOSTS",
        (),
        _csv,
        "Extra Host header values accepted (comma-separated), e.g. a reverse proxy's name. Loopback names "
        "are always accepted; others get 421 (DNS-rebinding defence).",
    )
    allowed_tool_cidrs: tuple[str, ...] = _setting(
        "ALLOWED_TOOL_CIDRS",
        (),
        _cidrs,
        "Networks (CIDR, comma-separated) that tool calls may reach although they are not public, e.g. "
        "127.0.0.1/32 for a test upstream. Empty: only globally routable addresses.",
    )
    # -- sizes and deadlines; slow clients and connection caps (web/connections.py) ------------
    upstream_timeout_s: float = _setting(
        "TOOLSPOKE_UPSTREAM_TIMEOUT_S",
        30.0,
        _positive(float),
        "Total deadline in seconds for one upstream call, connect to last byte.",
    )
    upstream_max_bytes: int = _setting(
        "TOOLSPOKE_UPSTREAM_MAX_BYTES",
        262144,
        _positive(int),
        "Largest upstream response body accepted, in bytes (decoded); larger is upstream_too_large.",
    )
    max_request_bytes: int = _setting(
        "TOOLSPOKE_MAX_REQUEST_BYTES",
        4 * 1024 * 1024,
        _positive(int),
        "Largest request body the HTTP server accepts, in bytes (413 above).",
    )
    shutdown_grace_s: float = _setting(
        "TOOLSPOKE_SHUTDOWN_GRACE_S",
        15.0,
        _positive(float),
        "Seconds `serve` gives calls in flight to finish after SIGTERM (new connections are refused at "
        "once); calls still running then are cut off, audited `interrupted`.",
    )
    request_head_timeout_s: float = _setting(
        "TOOLSPOKE_REQUEST_HEAD_TIMEOUT_S",
        10.0,
        _positive(float),
        "Seconds a client has to send a complete request head (request line and headers), counted from "
        "the connection's opening (first request) or from the head's first byte (later requests on a "
        "kept-alive connection), however slowly its bytes trickle in. Later: 408 and the connection "
        "closed; a connection that sent nothing is closed.",
    )
    max_connections: int = _setting(
        "TOOLSPOKE_MAX_CONNECTIONS",
        1000,
        _positive(int),
        "Most client connections `serve` holds open at once; one more is answered 503 "
        "`too_many_connections` (`Retry-After: 1`) before anything is read, and closed. Keep it under the "
        "process's open-file limit (`ulimit -n`).",
    )
    max_connections_per_address: int = _setting(
        "TOOLSPOKE_MAX_CONNECTIONS_PER_ADDRESS",
        256,
        _positive(int),
        "Most connections one client address (the TCP peer) may hold open at once; one more is answered "
        "503 and closed. Behind a reverse proxy every connection has the proxy's address: raise it (up to "
        "`max_connections`) there.",
    )
    # -- imports and search --------------------------------------------------------------------
    import_max_bytes: int = _setting(
        "TOOLSPOKE_IMPORT_MAX_BYTES",
        32 * 1024 * 1024,
        _positive(int),
        "Largest OpenAPI document or catalogue file accepted by an import, in bytes.",
    )
    screen_tools: bool = _setting(
        "TOOLSPOKE_SCREEN_TOOLS",
        True,
        _bool,
        "Screen every imported and re-synced tool's name, description and schema for text aimed at the "
        "model (hidden instructions, steering of other tools, requests for secrets, invisible characters, "
        "imitation names) and hold a flagged tool pending with its reasons until an owner approves it "
        "(docs/security.md). Off: nothing is held for what it says; invisible characters are still "
        "removed from what agents see.",
    )
    lore_max_files: int = _setting(
        "TOOLSPOKE_LORE_MAX_FILES",
        10_000,
        _positive(int),
        "Most files a Lore knowledge base (a folder or an archive) may hold; more refuses the import.",
    )
    lore_max_bytes: int = _setting(
        "TOOLSPOKE_LORE_MAX_BYTES",
        512 * 1024 * 1024,
        _positive(int),
        "Most bytes a Lore knowledge base's files may hold in all, uncompressed (an archive that "
        "expands past it is refused); one file is at most `import_max_bytes`.",
    )
    lore_chunk_chars: int = _setting(
        "TOOLSPOKE_LORE_CHUNK_CHARS",
        1_500,
        _positive(int),
        "Longest chunk of a Lore document, in characters: `search_lore` finds and quotes chunks, "
        "cut at headings and then at paragraph breaks.",
    )
    search_default_limit: int = _setting(
        "TOOLSPOKE_SEARCH_DEFAULT_LIMIT",
        8,
        _positive(int),
        "Results `search_tools` returns when the caller gives no limit.",
    )
    search_max_limit: int = _setting(
        "TOOLSPOKE_SEARCH_MAX_LIMIT",
        50,
        _positive(int),
        "Upper bound on `limit` for `search_tools` and `toolspoke search`.",
    )
    # -- semantic search (gateway/semantic.py; docs/search.md) ---------------------------------
    embeddings: str = _setting(
        "TOOLSPOKE_EMBEDDINGS",
        "none",
        _choice("none", "local", "openai"),
        "Embedding provider for semantic re-rank: `none` (lexical only), `local` (the bundled "
        "all-MiniLM-L6-v2 model, offline) or `openai` (an OpenAI-compatible `/v1/embeddings`).",
    )
    embeddings_url: str | None = _setting(
        "TOOLSPOKE_EMBEDDINGS_URL",
        None,
        str,
        "Base URL of the OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1 (Ollama). Default "
        "with OPENROUTER_API_KEY set: https://openrouter.ai/api/v1. Reached through the egress guard, "
        "which opens this origin (loopback and LAN included) for embeddings only.",
    )
    embeddings_model: str | None = _setting(
        "TOOLSPOKE_EMBEDDINGS_MODEL",
        None,
        str,
        "Model name sent to the endpoint (default with OpenRouter: openai/text-embedding-3-small). "
        "Changing it re-embeds every tool.",
    )
    embeddings_api_key: Secret | None = _setting(
        "TOOLSPOKE_EMBEDDINGS_API_KEY",
        None,
        _secret,
        "Bearer key for the embeddings endpoint; never logged or returned.",
    )
    openrouter_api_key: Secret | None = _setting(
        "OPENROUTER_API_KEY",
        None,
        _secret,
        "OpenRouter key: with `embeddings = openai` and no URL or key of its own, OpenRouter is used.",
    )
    embeddings_dimensions: int | None = _setting(
        "TOOLSPOKE_EMBEDDINGS_DIMENSIONS",
        None,
        _positive(int),
        "Dimensions to ask the endpoint for (OpenAI's `dimensions`); a reply of another size is an error.",
    )
    embeddings_timeout_s: float = _setting(
        "TOOLSPOKE_EMBEDDINGS_TIMEOUT_S",
        1.0,
        _positive(float),
        "Deadline for embedding one search query; past it the search answers lexically.",
    )
    embeddings_breaker_s: float = _setting(
        "TOOLSPOKE_EMBEDDINGS_BREAKER_S",
        30.0,
        _non_negative(float),
        "After a provider error or timeout, seconds during which searches skip the provider (lexical) "
        "before trying it again.",
    )
    semantic_search: bool = _setting(
        "SEMANTIC_SEARCH",
        True,
        _bool,
        "Kill switch for the semantic pass at start-up. At run time `toolspoke semantic on|off` or `PUT "
        "/api/v1/search/semantic` overrides it with no restart.",
    )
    search_log_queries: bool = _setting(
        "TOOLSPOKE_SEARCH_LOG_QUERIES",
        False,
        _bool,
        "Log the text of zero-result and low-score searches (off: only that one happened is logged and "
        "counted).",
    )
    # -- legacy MCP sessions and SSE streams ---------------------------------------------------
    session_ttl_s: float = _setting(
        "TOOLSPOKE_SESSION_TTL_S",
        3600.0,
        _positive(float),
        "Idle seconds after which a legacy (2025) MCP session expires; the client then gets 404.",
    )
    max_sessions: int = _setting(
        "TOOLSPOKE_MAX_SESSIONS",
        10000,
        _positive(int),
        "Most legacy MCP sessions held at once; the least recently used is dropped beyond it.",
    )
    max_sessions_per_key: int = _setting(
        "TOOLSPOKE_MAX_SESSIONS_PER_KEY",
        100,
        _positive(int),
        "Most legacy MCP sessions one API key may hold; a new one drops that key's least recently used "
        "session, never another key's.",
    )
    max_streams_per_key: int = _setting(
        "TOOLSPOKE_MAX_STREAMS_PER_KEY",
        16,
        _positive(int),
        "Most legacy SSE streams (`GET /sse`) one API key may hold open at once; one more is refused with "
        "429 `too_many_streams`.",
    )
    # -- the admin console (web/console/) ------------------------------------------------------
    console_idle_minutes: float = _setting(
        "TOOLSPOKE_CONSOLE_IDLE_MINUTES",
        30.0,
        _positive(float),
        "Minutes a console session may go unused before it ends; each page it loads renews it.",
    )
    console_session_hours: float = _setting(
        "TOOLSPOKE_CONSOLE_SESSION_HOURS",
        12.0,
        _positive(float),
        "Hours a console session lasts at most, however much it is used; then its user signs in again.",
    )
    # -- local stdio MCP toolkits (children/processes.py) --------------------------------------
    stdio_allowed_commands: tuple[str, ...] = _setting(
        "TOOLSPOKE_STDIO_ALLOWED_COMMANDS",
        ("npx", "uvx", "node", "python3", "python", "deno"),
        _csv,
        "Executables a local stdio MCP toolkit may run (comma-separated basenames); anything else is "
        "refused at import.",
    )
    stdio_inherit_env: tuple[str, ...] = _setting(
        "TOOLSPOKE_STDIO_INHERIT_ENV",
        ("PATH", "HOME"),
        _csv,
        "Names of the gateway's own environment variables a stdio child inherits; nothing else leaks in. "
        "Per-toolkit variables are given at import (`--env K=V`).",
    )
    stdio_idle_s: float = _setting(
        "TOOLSPOKE_STDIO_IDLE_S",
        600.0,
        _positive(float),
        "Seconds without traffic after which a stdio upstream process is stopped; the next call starts it "
        "again.",
    )
    stdio_start_timeout_s: float = _setting(
        "TOOLSPOKE_STDIO_START_TIMEOUT_S",
        60.0,
        _positive(float),
        "Seconds a stdio upstream may take to answer its first message (npx may be installing a package); "
        "until then it is `starting`, not broken.",
    )
    # -- the stdio sandbox (children/sandbox.py) ------------------------------------------------
    stdio_sandbox: str = _setting(
        "TOOLSPOKE_STDIO_SANDBOX",
        "auto",
        _choice("auto", "require", "off"),
        "Confine every stdio MCP server with bubblewrap (system read-only, its own work directory and "
        "HOME, no network, resource limits). `auto`: wherever bubblewrap works, plain processes (with a "
        "warning) elsewhere; `require`: refuse to start a stdio server without the sandbox; `off`: never. "
        "`toolspoke doctor` says what this machine offers.",
    )
    stdio_sandbox_read_paths: tuple[str, ...] = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_READ_PATHS",
        (),
        _abs_paths,
        "Absolute paths (comma-separated) a sandboxed server may read besides the system directories: "
        "where a locally installed server's code lives (e.g. a node_modules folder outside /usr and /opt). "
        "The data directory stays hidden even below one of them.",
    )
    stdio_sandbox_memory_mb: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_MEMORY_MB",
        4096,
        _non_negative(int),
        "Address space of each sandboxed process in MiB (RLIMIT_AS; node reserves more than it uses); "
        "0: no limit.",
    )
    stdio_sandbox_cpu_s: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_CPU_S",
        3600,
        _non_negative(int),
        "CPU seconds a sandboxed server process may use over its life (RLIMIT_CPU); 0: no limit.",
    )
    stdio_sandbox_processes: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_PROCESSES",
        256,
        _non_negative(int),
        "Processes and threads one sandboxed server may have at once (RLIMIT_NPROC in its own user "
        "namespace); 0: no limit.",
    )
    stdio_sandbox_open_files: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_OPEN_FILES",
        1024,
        _non_negative(int),
        "Open descriptors per sandboxed process (RLIMIT_NOFILE); 0: no limit.",
    )
    stdio_sandbox_file_mb: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_FILE_MB",
        1024,
        _non_negative(int),
        "Largest file a sandboxed server may write, in MiB (RLIMIT_FSIZE); 0: no limit.",
    )
    stdio_sandbox_tmp_mb: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_TMP_MB",
        64,
        _positive(int),
        "Size of a sandboxed server's private /tmp in MiB (memory-backed).",
    )
    stdio_sandbox_uid_base: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_UID_BASE",
        200000,
        _positive(int),
        "When the gateway runs as root: the first of the 65536 unprivileged uids sandboxed servers run as, "
        "one per toolkit (the kernel does not apply process limits to root); each toolkit's directories "
        "are given to its uid.",
    )
    # -- upstream health probes (gateway/health.py) --------------------------------------------
    health_interval_s: float = _setting(
        "TOOLSPOKE_HEALTH_INTERVAL_S",
        30.0,
        _non_negative(float),
        "Seconds between health probes of every upstream toolkit (MCP: `ping` or `server/discover`; "
        "OpenAPI: DNS and TCP connect only). 0 turns probes off, and with them the fast `upstream_broken` "
        "refusal.",
    )
    health_timeout_s: float = _setting(
        "TOOLSPOKE_HEALTH_TIMEOUT_S",
        10.0,
        _positive(float),
        "Deadline in seconds for one health probe; a probe that misses it counts as a failure.",
    )
    health_slow_s: float = _setting(
        "TOOLSPOKE_HEALTH_SLOW_S",
        5.0,
        _positive(float),
        "A probe answered later than this many seconds is slow; slow answers in a row make a toolkit "
        "`degraded`, one alone changes nothing.",
    )
    health_degraded_after: int = _setting(
        "TOOLSPOKE_HEALTH_DEGRADED_AFTER",
        2,
        _positive(int),
        "Consecutive failed (or slow) probes after which an active toolkit becomes `degraded`.",
    )
    health_broken_after: int = _setting(
        "TOOLSPOKE_HEALTH_BROKEN_AFTER",
        4,
        _positive(int),
        "Consecutive failures after which a toolkit becomes `broken`: its tools then answer at once with "
        "`upstream_broken` until probes see it recover.",
    )
    health_recover_after: int = _setting(
        "TOOLSPOKE_HEALTH_RECOVER_AFTER",
        2,
        _positive(int),
        "Consecutive successful probes after which a degraded or broken toolkit is `active` again.",
    )
    # -- MCP re-sync and import limits (gateway/sync_schedule.py) ------------------------------
    mcp_resync_s: float = _setting(
        "TOOLSPOKE_MCP_RESYNC_S",
        3600.0,
        _non_negative(float),
        "Seconds between periodic re-syncs of every MCP toolkit's tool list (0: off). New upstream tools "
        "arrive pending, vanished ones are disabled, changed ones go back to pending; a "
        "`tools/list_changed` notification from a pooled session and `toolspoke sync` re-sync too.",
    )
    imports_per_hour: int = _setting(
        "TOOLSPOKE_IMPORTS_PER_HOUR",
        10,
        _non_negative(int),
        "Imports one user may start through the admin API per sliding hour (the CLI is not limited); the "
        "next one is refused (HTTP 429, `rate_limited`) with `retry_after_s`, the seconds to wait.",
    )
    # -- spend, limits and storage (ledger/, gateway/accounting.py, db/) -----------------------
    default_fee: float = _setting(
        "TOOLSPOKE_DEFAULT_FEE",
        1.0,
        _non_negative(float),
        "Credits a non-owner call to a toolkit costs when its owner set no fee (at most 3 decimals; 0: "
        "free).",
    )
    rate_limit: int = _setting(
        "TOOLSPOKE_RATE_LIMIT",
        120,
        _positive(int),
        "Tool calls one agent (or, without an agent, one key) may make per "
        "`TOOLSPOKE_RATE_LIMIT_WINDOW_S`: a burst of this many, then an even trickle (GCRA). Beyond it: "
        "`-32001` with `retry_after_s`.",
    )
    rate_limit_window_s: float = _setting(
        "TOOLSPOKE_RATE_LIMIT_WINDOW_S",
        60.0,
        _positive(float),
        "The period, in seconds, that `TOOLSPOKE_RATE_LIMIT` and `TOOLSPOKE_BROWSE_RATE_LIMIT` count over.",
    )
    browse_rate_limit: int = _setting(
        "TOOLSPOKE_BROWSE_RATE_LIMIT",
        600,
        _positive(int),
        "search_tools, list_toolkits, describe_tools and read_guide calls, and the MCP methods "
        "`tools/list`, `initialize`, `ping`, `server/discover` and `logging/setLevel`, one identity may "
        "make per window: free and unaudited, but limited so nobody can flood the gateway.",
    )
    audit_retention_days: float = _setting(
        "TOOLSPOKE_AUDIT_RETENTION_DAYS",
        90.0,
        _non_negative(float),
        "Days an audit row (call history) is kept; older rows are pruned hourly. 0 keeps them forever. "
        "Ledger entries are never pruned: balances derive from them.",
    )
    db_synchronous: str = _setting(
        "TOOLSPOKE_DB_SYNCHRONOUS",
        "FULL",
        _synchronous,
        "SQLite `synchronous` for every write: FULL (each commit, charges and audit rows included, is on "
        "disk before a call is answered: survives power loss) or NORMAL (survives kill -9 and crashes of "
        "the process, but a power loss or OS crash may drop the last commits; calls answer ~an fsync "
        "sooner).",
    )
    min_free_disk_bytes: int = _setting(
        "TOOLSPOKE_MIN_FREE_DISK_BYTES",
        32 * 1024 * 1024,
        _positive(int),
        "Free space (for an unprivileged user, as `df` shows it) the data directory's disk must keep for "
        "tool calls to be sent. Below it, every tool call is refused before anything leaves (-32003 "
        "`storage_unavailable`, `data.sent: false`, nothing charged) and `/readyz` answers 503, until "
        "space returns; so are calls after any failed database write until a probe write succeeds. The "
        "margin lets calls in flight still record their charges and audit rows.",
    )
    idempotency_retention_h: float = _setting(
        "TOOLSPOKE_IDEMPOTENCY_RETENTION_H",
        24.0,
        _at_least(24.0),
        "Hours an idempotency key (`_meta` `toolspoke/idempotencyKey` on tools/call) and its stored "
        "result are kept; older keys are pruned and may be used again. At least 24.",
    )
    metrics_key: Secret | None = _setting(
        "TOOLSPOKE_METRICS_KEY",
        None,
        _metrics_key,
        "A bearer key (16 characters or more) for `/metrics` (a scraper's, so it needs no admin key). "
        "When set, `/metrics` needs it or an admin key; unset, `/metrics` is open on a loopback bind and "
        "needs an admin key on any other.",
    )
    # -- the demo toolkit and logging ----------------------------------------------------------
    demo: bool = _setting(
        "TOOLSPOKE_DEMO",
        True,
        _bool,
        "Serve the built-in demo API and install it as the `demo` toolkit, so that a fresh appliance has "
        "a tool whose calls really work with no internet, on every face (`/mcp`, `toolspoke stdio`, "
        "`toolspoke call`), with or without `serve` running.",
    )
    log_level: str = _setting(
        "TOOLSPOKE_LOG_LEVEL",
        "INFO",
        _upper,
        "Log level: DEBUG, INFO, WARNING or ERROR.",
    )

    @property
    def db_path(self) -> Path:
        return Path(self.data_dir) / "toolspoke.db"

    @property
    def master_key_path(self) -> Path:
        return Path(self.data_dir) / "master.key"

    def replace(self, **changes: Any) -> Settings:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return Settings(**values)


SETTINGS: tuple[Setting, ...] = tuple(Setting(f.name, *f.metadata[_DECLARED]) for f in fields(Settings))
_BY_NAME = {s.name: s for s in SETTINGS}


def _parse(setting: Setting, raw: Any, source: str) -> Any:
    if raw is None:
        return None
    try:
        return setting.parse(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"setting {setting.name} ({source}): {exc}", field=setting.name) from None


def load(
    cli: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: str | None = None,
) -> Settings:
    """Resolve every setting; later sources win: default, toml file, environment, CLI."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {s.name: s.default for s in SETTINGS}
    path = config_file or env.get("TOOLSPOKE_CONFIG")
    if path:
        try:
            with open(path, "rb") as fh:
                doc = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        for key, raw in doc.items():
            setting = _BY_NAME.get(key)
            if setting is None:
                raise ConfigError(f"config file {path}: unknown setting {key!r}", field=key)
            values[key] = _parse(setting, raw, path)
    for setting in SETTINGS:
        if setting.env in env:
            values[setting.name] = _parse(setting, env[setting.env], setting.env)
    for key, raw in (cli or {}).items():
        if raw is not None:
            values[key] = _parse(_BY_NAME[key], raw, "command line")
    if not values["data_dir"]:
        values["data_dir"] = _default_data_dir()
    values["data_dir"] = str(Path(values["data_dir"]).expanduser().resolve())
    return Settings(**values)


def environment_snapshot(names: tuple[str, ...]) -> dict[str, str]:
    """The named environment variables that are set: what a stdio upstream may inherit."""
    return {n: os.environ[n] for n in names if n in os.environ}


def flag_help(name: str) -> str:
    """A command-line flag's help: the setting's own text, and where else it can be set."""
    setting = _BY_NAME[name]
    default = "" if setting.default is None else f"; default {_shown(setting.default)}"
    return f"{setting.help} Also {setting.env}{default}."


# -- the table in docs/configuration.md ------------------------------------------------------

TABLE_START = "<!-- settings: generated from appliance/config.py by `python -m appliance.config --update` -->"
TABLE_END = "<!-- end of settings -->"


def _shown(default: Any) -> str:
    if default is None:
        return "(unset)"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, tuple):
        return ", ".join(default) or "(empty)"
    return str(default)


def markdown_table() -> str:
    """The settings table of ``docs/configuration.md``, one row per setting, in order."""
    rows = ["| TOML key | environment variable | default | meaning |", "|---|---|---|---|"]
    for s in SETTINGS:
        meaning = s.help.replace("|", "\\|")  # a bare bar would end the cell
        rows.append(f"| `{s.name}` | `{s.env}` | {_shown(s.default)} | {meaning} |")
    return "\n".join(rows) + "\n"


def with_table(document: str) -> str:
    """``document`` with the text between the table's markers replaced by the current table."""
    start, end = document.find(TABLE_START), document.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError(f"the document lacks the markers {TABLE_START!r} … {TABLE_END!r}")
    # blank lines around the table: a comment line next to it would end or start it early
    return f"{document[: start + len(TABLE_START)]}\n\n{markdown_table()}\n{document[end:]}"


def _main(argv: list[str]) -> int:
    if argv == ["--markdown"]:
        sys.stdout.write(markdown_table())
        return 0
    if argv[:1] == ["--update"] and len(argv) <= 2:
        # By default the source tree's own document (beside the package, in a checkout).
        target = Path(argv[1]) if len(argv) == 2 else Path(__file__).parents[1] / "docs" / "configuration.md"
        target.write_text(with_table(target.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    sys.stderr.write("usage: python -m appliance.config --markdown | --update [FILE]\n")
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
