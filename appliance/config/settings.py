"""The declarations: one ``Settings`` field per setting, grouped by area.

A field's name is its TOML key and its annotation its type; ``_setting`` gives the environment
variable, the default, the parser (bounds included, from ``values``) and the help text.
``SETTINGS`` is what the loader, the flags' help and the documentation table read.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from appliance.config import values
from appliance.config.declare import _DECLARED, Setting, _setting
from appliance.secret import Secret


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
        values.port,
        "TCP port `serve` listens on (0 picks a free port).",
    )
    admin_key: Secret | None = _setting(
        "TOOLSPOKE_ADMIN_KEY",
        None,
        values.secret,
        "Admin API key that `init` installs instead of generating one (for automation). Stored hashed; "
        "never printed back.",
    )
    master_key: Secret | None = _setting(
        "TOOLSPOKE_MASTER_KEY",
        None,
        values.stripped_secret,
        "The vault's master key (64 hex characters) instead of the `master.key` file in the data dir. "
        "When the vault holds secrets, a missing, malformed or wrong key stops start-up.",
    )
    api_key: Secret | None = _setting(
        "TOOLSPOKE_API_KEY",
        None,
        values.secret,
        "The API key `toolspoke stdio` acts with (a desktop client's config passes it in the "
        "environment). Checked on every request, so revoking it takes effect at once.",
    )
    # -- who may reach it, and what it may reach -----------------------------------------------
    allowed_origins: tuple[str, ...] = _setting(
        "TOOLSPOKE_ALLOWED_ORIGINS",
        (),
        values.csv_list,
        "Extra browser origins allowed on the MCP endpoint (comma-separated). Loopback origins are always "
        "allowed; any other Origin gets 403.",
    )
    allowed_hosts: tuple[str, ...] = _setting(
        "TOOLSPOKE_ALLOWED_HOSTS",
        (),
        values.csv_list,
        "Extra Host header values accepted (comma-separated), e.g. a reverse proxy's name. Loopback names "
        "are always accepted; others get 421 (DNS-rebinding defence).",
    )
    allowed_tool_cidrs: tuple[str, ...] = _setting(
        "ALLOWED_TOOL_CIDRS",
        (),
        values.cidrs,
        "Networks (CIDR, comma-separated) that tool calls may reach although they are not public, e.g. "
        "127.0.0.1/32 for a test upstream. Empty: only globally routable addresses.",
    )
    read_only: bool = _setting(
        "TOOLSPOKE_READ_ONLY",
        False,
        values.boolean,
        "The read-only guard for the whole appliance: only read tools run, on every path (runners, calls by "
        "name, `/mcp/<slug>`, `toolspoke call`, the operator's too), and search, list and describe show no "
        "write or destructive tool. A key or an agent can be made read-only on its own (docs/security.md).",
    )
    approval_ttl_s: float = _setting(
        "TOOLSPOKE_APPROVAL_TTL_S",
        900.0,
        values.between(10.0, 7 * 86400.0),
        "Seconds a pending or approved call approval stays valid (an `approve` rule of the call "
        "policy): after that, the call must be asked for and approved again. 10 s to 7 days.",
    )
    code_tools: bool = _setting(
        "TOOLSPOKE_CODE_TOOLS",
        False,
        values.boolean,
        "List and run the code tools `use_code` (a JavaScript script that may call read tools) and "
        "`run_code` (any tool) on the bridge (docs/code.md). Off by default: they add about 130 tokens to "
        "`tools/list`. Every call a script makes takes the same pipeline as a direct call.",
    )
    code_seconds: float = _setting(
        "TOOLSPOKE_CODE_SECONDS",
        30.0,
        values.between(0.1, 600.0),
        "Wall time of one script run in seconds, its tool calls included (0.1 to 600); past it the run "
        "ends `code_time_limit`.",
    )
    code_memory_mb: int = _setting(
        "TOOLSPOKE_CODE_MEMORY_MB",
        64,
        values.positive(int),
        "Memory of one script run's JavaScript engine in MiB; past it the run ends `code_memory_limit`.",
    )
    code_max_calls: int = _setting(
        "TOOLSPOKE_CODE_MAX_CALLS",
        50,
        values.positive(int),
        "Tool calls one script run may make; the next one ends the run `code_call_limit`.",
    )
    code_max_result_bytes: int = _setting(
        "TOOLSPOKE_CODE_MAX_RESULT_BYTES",
        1024 * 1024,
        values.positive(int),
        "Largest answer of one tool call a script receives, in bytes of JSON; a larger one ends the run "
        "`code_result_limit` (the toolkit's response cap still bounds what the upstream may send).",
    )
    code_max_output_bytes: int = _setting(
        "TOOLSPOKE_CODE_MAX_OUTPUT_BYTES",
        64 * 1024,
        values.positive(int),
        "Largest output of one script run (its `console.log` lines and its result), in bytes; past it "
        "the run ends `code_output_limit`.",
    )
    code_max_source_bytes: int = _setting(
        "TOOLSPOKE_CODE_MAX_SOURCE_BYTES",
        64 * 1024,
        values.positive(int),
        "Largest script accepted, in bytes of UTF-8; a larger one is refused (JSON-RPC -32602, field "
        "`/code`) before anything runs.",
    )
    code_runs_at_once: int = _setting(
        "TOOLSPOKE_CODE_RUNS_AT_ONCE",
        2,
        values.positive(int),
        "Script runs at once in this process (each holds a thread while it runs); more wait for a place, "
        "at most their own wall time, then end `code_busy`.",
    )
    dataflow_window_s: float = _setting(
        "TOOLSPOKE_DATAFLOW_WINDOW_S",
        3600.0,
        values.between(1.0, 7 * 86400.0),
        "The data-flow guard's window in seconds, for toolkits without their own: when one agent's "
        "calls within it read private data and brought in untrusted content (tools so labelled), a call "
        "of a tool labelled outward is held (docs/security.md). 1 s to 7 days.",
    )
    dataflow_action: str = _setting(
        "TOOLSPOKE_DATAFLOW_ACTION",
        "approve",
        values.choice("approve", "deny"),
        "What the data-flow guard does to a held outward call, for toolkits without their own setting: "
        "`approve` (a person's yes for that call, asked like an `approve` rule's; the toolkit's owner or "
        "an admin approves) or `deny`.",
    )
    # -- sizes and deadlines; slow clients and connection caps (web/connections.py) ------------
    upstream_timeout_s: float = _setting(
        "TOOLSPOKE_UPSTREAM_TIMEOUT_S",
        30.0,
        values.positive(float),
        "Total deadline in seconds for one upstream call, connect to last byte.",
    )
    upstream_max_bytes: int = _setting(
        "TOOLSPOKE_UPSTREAM_MAX_BYTES",
        262144,
        values.positive(int),
        "Largest upstream response body accepted, in bytes (decoded); larger is upstream_too_large.",
    )
    max_request_bytes: int = _setting(
        "TOOLSPOKE_MAX_REQUEST_BYTES",
        4 * 1024 * 1024,
        values.positive(int),
        "Largest request body the HTTP server accepts, in bytes (413 above).",
    )
    shutdown_grace_s: float = _setting(
        "TOOLSPOKE_SHUTDOWN_GRACE_S",
        15.0,
        values.positive(float),
        "Seconds `serve` gives calls in flight to finish after SIGTERM (new connections are refused at "
        "once); calls still running then are cut off, audited `interrupted`.",
    )
    request_head_timeout_s: float = _setting(
        "TOOLSPOKE_REQUEST_HEAD_TIMEOUT_S",
        10.0,
        values.positive(float),
        "Seconds a client has to send a complete request head (request line and headers), counted from "
        "the connection's opening (first request) or from the head's first byte (later requests on a "
        "kept-alive connection), however slowly its bytes trickle in. Later: 408 and the connection "
        "closed; a connection that sent nothing is closed.",
    )
    max_connections: int = _setting(
        "TOOLSPOKE_MAX_CONNECTIONS",
        1000,
        values.positive(int),
        "Most client connections `serve` holds open at once; one more is answered 503 "
        "`too_many_connections` (`Retry-After: 1`) before anything is read, and closed. Keep it under the "
        "process's open-file limit (`ulimit -n`).",
    )
    max_connections_per_address: int = _setting(
        "TOOLSPOKE_MAX_CONNECTIONS_PER_ADDRESS",
        256,
        values.positive(int),
        "Most connections one client address (the TCP peer) may hold open at once; one more is answered "
        "503 and closed. Behind a reverse proxy every connection has the proxy's address: raise it (up to "
        "`max_connections`) there.",
    )
    # -- imports and search --------------------------------------------------------------------
    import_max_bytes: int = _setting(
        "TOOLSPOKE_IMPORT_MAX_BYTES",
        32 * 1024 * 1024,
        values.positive(int),
        "Largest OpenAPI document or catalogue file accepted by an import, in bytes.",
    )
    screen_tools: bool = _setting(
        "TOOLSPOKE_SCREEN_TOOLS",
        True,
        values.boolean,
        "Screen every imported and re-synced tool's name, description and schema for text aimed at the "
        "model (hidden instructions, steering of other tools, requests for secrets, invisible characters, "
        "imitation names) and hold a flagged tool pending with its reasons until an owner approves it "
        "(docs/security.md). Off: nothing is held for what it says; invisible characters are still "
        "removed from what agents see.",
    )
    lore_max_files: int = _setting(
        "TOOLSPOKE_LORE_MAX_FILES",
        10_000,
        values.positive(int),
        "Most files a Lore knowledge base (a folder or an archive) may hold; more refuses the import.",
    )
    lore_max_bytes: int = _setting(
        "TOOLSPOKE_LORE_MAX_BYTES",
        512 * 1024 * 1024,
        values.positive(int),
        "Most bytes a Lore knowledge base's files may hold in all, uncompressed (an archive that "
        "expands past it is refused); one file is at most `import_max_bytes`.",
    )
    lore_chunk_chars: int = _setting(
        "TOOLSPOKE_LORE_CHUNK_CHARS",
        1_500,
        values.positive(int),
        "Longest chunk of a Lore document, in characters: `search_lore` finds and quotes chunks, "
        "cut at headings and then at paragraph breaks.",
    )
    # -- naming inferred tools with a chat model (gateway/naming_model.py; docs/api.md) --------
    infer_chat_url: str | None = _setting(
        "TOOLSPOKE_INFER_CHAT_URL",
        None,
        str,
        "Base URL of an OpenAI-compatible chat endpoint (`POST {url}/chat/completions`, e.g. Ollama's "
        "http://127.0.0.1:11434/v1) that names and describes the tools an examples import infers; empty: "
        "off. It is sent each tool's method, path template, parameter names and types and body schema, never "
        "a value from the examples, through the egress guard, which opens this origin (loopback and LAN "
        "included) for it alone; a failure keeps the examples' names.",
    )
    infer_chat_model: str | None = _setting(
        "TOOLSPOKE_INFER_CHAT_MODEL",
        None,
        str,
        "Model name sent to the chat endpoint; required when `infer_chat_url` is set.",
    )
    infer_chat_api_key: Secret | None = _setting(
        "TOOLSPOKE_INFER_CHAT_API_KEY",
        None,
        values.secret,
        "Bearer key for the chat endpoint; never logged, returned or sent anywhere else.",
    )
    infer_chat_timeout_s: float = _setting(
        "TOOLSPOKE_INFER_CHAT_TIMEOUT_S",
        60.0,
        values.positive(float),
        "Deadline in seconds for one request to the chat endpoint (at most 20 tools each); past "
        "it the import keeps the names from the examples for the tools not yet named.",
    )
    search_default_limit: int = _setting(
        "TOOLSPOKE_SEARCH_DEFAULT_LIMIT",
        8,
        values.positive(int),
        "Results `search_tools` returns when the caller gives no limit.",
    )
    search_max_limit: int = _setting(
        "TOOLSPOKE_SEARCH_MAX_LIMIT",
        50,
        values.positive(int),
        "Upper bound on `limit` for `search_tools` and `toolspoke search`.",
    )
    # -- OAuth as an MCP client (oauthclient/; docs/security.md) -------------------------------
    public_url: str | None = _setting(
        "TOOLSPOKE_PUBLIC_URL",
        None,
        values.base_url,
        "The appliance's own base URL as browsers and authorization servers reach it, e.g. "
        "https://toolspoke.example.com. OAuth authorizations return to `<it>/oauth/callback`, and "
        "`<it>/oauth/client-metadata.json` is the appliance's OAuth Client ID Metadata Document. Unset: "
        "no OAuth authorization of upstreams.",
    )
    oauth_client_metadata_url: str | None = _setting(
        "TOOLSPOKE_OAUTH_CLIENT_METADATA_URL",
        None,
        values.client_id_url,
        "Where the appliance's Client ID Metadata Document is published, when authorization servers "
        "cannot fetch it from the appliance (a private network): an https URL serving a copy of "
        "`/oauth/client-metadata.json`. It is the appliance's OAuth client_id. Default: the public URL's.",
    )
    # -- semantic search (gateway/semantic.py; docs/search.md) ---------------------------------
    embeddings: str = _setting(
        "TOOLSPOKE_EMBEDDINGS",
        "auto",
        values.choice("auto", "none", "local", "openai"),
        "Embedding provider for semantic re-rank: `auto` (`local` when the bundled model is "
        "installed, as in the binary and after `make model`, else `none`), `none` (lexical only), "
        "`local` (the bundled all-MiniLM-L6-v2 model, offline) or `openai` (an OpenAI-compatible "
        "`/v1/embeddings`). Searches are lexical until the catalogue is embedded (in the background).",
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
        values.secret,
        "Bearer key for the embeddings endpoint; never logged or returned.",
    )
    openrouter_api_key: Secret | None = _setting(
        "OPENROUTER_API_KEY",
        None,
        values.secret,
        "OpenRouter key: with `embeddings = openai` and no URL or key of its own, OpenRouter is used.",
    )
    embeddings_dimensions: int | None = _setting(
        "TOOLSPOKE_EMBEDDINGS_DIMENSIONS",
        None,
        values.positive(int),
        "Dimensions to ask the endpoint for (OpenAI's `dimensions`); a reply of another size is an error.",
    )
    embeddings_timeout_s: float = _setting(
        "TOOLSPOKE_EMBEDDINGS_TIMEOUT_S",
        1.0,
        values.positive(float),
        "Deadline for embedding one search query; past it the search answers lexically.",
    )
    embeddings_backfill_threads: int = _setting(
        "TOOLSPOKE_EMBEDDINGS_BACKFILL_THREADS",
        2,
        values.positive(int),
        "Threads the local model embeds a backfill's tools on (each text still alone, so the "
        "vectors do not depend on it); search queries keep a thread of their own.",
    )
    embeddings_breaker_s: float = _setting(
        "TOOLSPOKE_EMBEDDINGS_BREAKER_S",
        30.0,
        values.non_negative(float),
        "After a provider error or timeout, seconds during which searches skip the provider (lexical) "
        "before trying it again.",
    )
    semantic_search: bool = _setting(
        "SEMANTIC_SEARCH",
        True,
        values.boolean,
        "Kill switch for the semantic pass at start-up. At run time `toolspoke semantic on|off` or `PUT "
        "/api/v1/search/semantic` overrides it with no restart.",
    )
    search_log_queries: bool = _setting(
        "TOOLSPOKE_SEARCH_LOG_QUERIES",
        False,
        values.boolean,
        "Log the text of zero-result and low-score searches (off: only that one happened is counted).",
    )
    # -- the search usage log (gateway/usage.py; docs/search.md) -------------------------------
    search_usage_log: bool = _setting(
        "TOOLSPOKE_SEARCH_USAGE_LOG",
        True,
        values.boolean,
        "Record, for each `search_tools` by a keyed caller, the query, who asked, when, the names shown and "
        "which of them the same caller then called (its rank), or a miss; never a call's arguments. Read by "
        "`toolspoke eval --from-usage`, the console's search playground and the usage boost.",
    )
    search_usage_window_s: float = _setting(
        "TOOLSPOKE_SEARCH_USAGE_WINDOW_S",
        300.0,
        values.positive(float),
        "Seconds after a search within which a call of one of its results counts for it; a search "
        "with no such call is a miss.",
    )
    search_usage_days: float = _setting(
        "TOOLSPOKE_SEARCH_USAGE_DAYS",
        30.0,
        values.positive(float),
        "Days a search usage row is kept; older rows are pruned hourly.",
    )
    search_usage_max_rows: int = _setting(
        "TOOLSPOKE_SEARCH_USAGE_MAX_ROWS",
        100_000,
        values.positive(int),
        "Most search usage rows kept; the oldest beyond it are pruned hourly.",
    )
    search_usage_boost: bool = _setting(
        "TOOLSPOKE_SEARCH_USAGE_BOOST",
        False,
        values.boolean,
        "Lift, in the hybrid ranking, tools this deployment's callers called after the same query "
        "(normalised): a bounded term from smoothed counts. Off by default.",
    )
    search_query_adapter: bool = _setting(
        "TOOLSPOKE_SEARCH_QUERY_ADAPTER",
        True,
        values.boolean,
        "Move each search's vector by the learned query adapter (bundled model only; docs/search.md).",
    )
    # -- legacy MCP sessions and SSE streams ---------------------------------------------------
    session_ttl_s: float = _setting(
        "TOOLSPOKE_SESSION_TTL_S",
        3600.0,
        values.positive(float),
        "Idle seconds after which a legacy (2025) MCP session expires; the client then gets 404.",
    )
    max_sessions: int = _setting(
        "TOOLSPOKE_MAX_SESSIONS",
        10000,
        values.positive(int),
        "Most legacy MCP sessions held at once; the least recently used is dropped beyond it.",
    )
    max_sessions_per_key: int = _setting(
        "TOOLSPOKE_MAX_SESSIONS_PER_KEY",
        100,
        values.positive(int),
        "Most legacy MCP sessions one API key may hold; a new one drops that key's least recently used "
        "session, never another key's.",
    )
    max_streams_per_key: int = _setting(
        "TOOLSPOKE_MAX_STREAMS_PER_KEY",
        16,
        values.positive(int),
        "Most legacy SSE streams (`GET /sse`) one API key may hold open at once; one more is refused with "
        "429 `too_many_streams`.",
    )
    # -- the admin console (web/console/) ------------------------------------------------------
    console_idle_minutes: float = _setting(
        "TOOLSPOKE_CONSOLE_IDLE_MINUTES",
        30.0,
        values.positive(float),
        "Minutes a console session may go unused before it ends; each page it loads renews it.",
    )
    console_session_hours: float = _setting(
        "TOOLSPOKE_CONSOLE_SESSION_HOURS",
        12.0,
        values.positive(float),
        "Hours a console session lasts at most, however much it is used; then its user signs in again.",
    )
    # -- local stdio MCP toolkits (children/processes.py) --------------------------------------
    stdio_allowed_commands: tuple[str, ...] = _setting(
        "TOOLSPOKE_STDIO_ALLOWED_COMMANDS",
        ("npx", "uvx", "node", "python3", "python", "deno"),
        values.csv_list,
        "Executables a local stdio MCP toolkit may run (comma-separated basenames); anything else is "
        "refused at import.",
    )
    stdio_inherit_env: tuple[str, ...] = _setting(
        "TOOLSPOKE_STDIO_INHERIT_ENV",
        ("PATH", "HOME"),
        values.csv_list,
        "Names of the gateway's own environment variables a stdio child inherits; nothing else leaks in. "
        "Per-toolkit variables are given at import (`--env K=V`).",
    )
    stdio_idle_s: float = _setting(
        "TOOLSPOKE_STDIO_IDLE_S",
        600.0,
        values.positive(float),
        "Seconds without traffic after which a stdio upstream process is stopped; the next call starts it "
        "again.",
    )
    stdio_start_timeout_s: float = _setting(
        "TOOLSPOKE_STDIO_START_TIMEOUT_S",
        60.0,
        values.positive(float),
        "Seconds a stdio upstream may take to answer its first message (npx may be installing a package); "
        "until then it is `starting`, not broken.",
    )
    # -- the stdio sandbox (children/sandbox.py) ------------------------------------------------
    stdio_sandbox: str = _setting(
        "TOOLSPOKE_STDIO_SANDBOX",
        "auto",
        values.choice("auto", "require", "off"),
        "Confine every stdio MCP server with bubblewrap (system read-only, its own work directory and "
        "HOME, no network, resource limits). `auto`: wherever bubblewrap works, plain processes (with a "
        "warning) elsewhere; `require`: refuse to start a stdio server without the sandbox; `off`: never. "
        "`toolspoke doctor` says what this machine offers.",
    )
    stdio_sandbox_read_paths: tuple[str, ...] = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_READ_PATHS",
        (),
        values.abs_paths,
        "Absolute paths (comma-separated) a sandboxed server may read besides the system directories: "
        "where a locally installed server's code lives (e.g. a node_modules folder outside /usr and /opt). "
        "The data directory stays hidden even below one of them.",
    )
    stdio_sandbox_memory_mb: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_MEMORY_MB",
        4096,
        values.non_negative(int),
        "Address space of each sandboxed process in MiB (RLIMIT_AS; node reserves more than it uses); "
        "0: no limit.",
    )
    stdio_sandbox_cpu_s: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_CPU_S",
        3600,
        values.non_negative(int),
        "CPU seconds a sandboxed server process may use over its life (RLIMIT_CPU); 0: no limit.",
    )
    stdio_sandbox_processes: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_PROCESSES",
        256,
        values.non_negative(int),
        "Processes and threads one sandboxed server may have at once (RLIMIT_NPROC in its own user "
        "namespace); 0: no limit.",
    )
    stdio_sandbox_open_files: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_OPEN_FILES",
        1024,
        values.non_negative(int),
        "Open descriptors per sandboxed process (RLIMIT_NOFILE); 0: no limit.",
    )
    stdio_sandbox_file_mb: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_FILE_MB",
        1024,
        values.non_negative(int),
        "Largest file a sandboxed server may write, in MiB (RLIMIT_FSIZE); 0: no limit.",
    )
    stdio_sandbox_tmp_mb: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_TMP_MB",
        64,
        values.positive(int),
        "Size of a sandboxed server's private /tmp in MiB (memory-backed).",
    )
    stdio_sandbox_disk_mb: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_DISK_MB",
        0,
        values.non_negative(int),
        "Total size in MiB of each of a sandboxed toolkit's work directory and HOME (npm, uv and pip caches "
        "included): each becomes an ext4 filesystem in a sparse image of that size, loop-mounted at its "
        "path, so a full one answers ENOSPC to that toolkit alone. Needs a root gateway (`toolspoke "
        "doctor`); 0: no total bound (one file's size is still bounded).",
    )
    stdio_sandbox_uid_base: int = _setting(
        "TOOLSPOKE_STDIO_SANDBOX_UID_BASE",
        200000,
        values.positive(int),
        "When the gateway runs as root: the first of the 65536 unprivileged uids sandboxed servers run as, "
        "one per toolkit (the kernel does not apply process limits to root); each toolkit's directories "
        "are given to its uid.",
    )
    # -- the sandboxed servers' egress (egress/connect_proxy.py) ------------------------------
    stdio_install_hosts: tuple[str, ...] = _setting(
        "TOOLSPOKE_STDIO_INSTALL_HOSTS",
        ("registry.npmjs.org", "pypi.org", "files.pythonhosted.org"),
        values.csv_list,
        "Hosts (host or host:port, comma-separated) a sandboxed `npx`/`uvx` package install may reach "
        "through the egress proxy, besides the hosts of a registry the child's environment names "
        "(`npm_config_registry`, `UV_INDEX_URL`, `UV_DEFAULT_INDEX`, `PIP_INDEX_URL`). The SSRF rules "
        "apply: a mirror on a private address must be listed in ALLOWED_TOOL_CIDRS.",
    )
    stdio_egress_upstream_proxy: str = _setting(
        "TOOLSPOKE_STDIO_EGRESS_UPSTREAM_PROXY",
        "",
        values.proxy_url,
        "An HTTP CONNECT proxy (http://host:port) the sandboxed servers' egress proxy goes through, where "
        "the site reaches the internet only through one; it is asked for the address the guard checked. "
        "Empty: connect directly.",
    )
    stdio_egress_connections: int = _setting(
        "TOOLSPOKE_STDIO_EGRESS_CONNECTIONS",
        16,
        values.positive(int),
        "Connections one sandboxed server may have open through the egress proxy at once.",
    )
    stdio_egress_idle_s: float = _setting(
        "TOOLSPOKE_STDIO_EGRESS_IDLE_S",
        120.0,
        values.positive(float),
        "Seconds a tunnel through the egress proxy may carry nothing before it is closed.",
    )
    # -- upstream health probes (gateway/health.py) --------------------------------------------
    health_interval_s: float = _setting(
        "TOOLSPOKE_HEALTH_INTERVAL_S",
        30.0,
        values.non_negative(float),
        "Seconds between health probes of every upstream toolkit (MCP: `ping` or `server/discover`; "
        "OpenAPI: DNS and TCP connect only). 0 turns probes off, and with them the fast `upstream_broken` "
        "refusal.",
    )
    health_timeout_s: float = _setting(
        "TOOLSPOKE_HEALTH_TIMEOUT_S",
        10.0,
        values.positive(float),
        "Deadline in seconds for one health probe; a probe that misses it counts as a failure.",
    )
    health_slow_s: float = _setting(
        "TOOLSPOKE_HEALTH_SLOW_S",
        5.0,
        values.positive(float),
        "A probe answered later than this many seconds is slow; slow answers in a row make a toolkit "
        "`degraded`, one alone changes nothing.",
    )
    health_degraded_after: int = _setting(
        "TOOLSPOKE_HEALTH_DEGRADED_AFTER",
        2,
        values.positive(int),
        "Consecutive failed (or slow) probes after which an active toolkit becomes `degraded`.",
    )
    health_broken_after: int = _setting(
        "TOOLSPOKE_HEALTH_BROKEN_AFTER",
        4,
        values.positive(int),
        "Consecutive failures after which a toolkit becomes `broken`: its tools then answer at once with "
        "`upstream_broken` until probes see it recover.",
    )
    health_recover_after: int = _setting(
        "TOOLSPOKE_HEALTH_RECOVER_AFTER",
        2,
        values.positive(int),
        "Consecutive successful probes after which a degraded or broken toolkit is `active` again.",
    )
    # -- MCP re-sync and import limits (gateway/sync_schedule.py) ------------------------------
    mcp_resync_s: float = _setting(
        "TOOLSPOKE_MCP_RESYNC_S",
        3600.0,
        values.non_negative(float),
        "Seconds between periodic re-syncs of every MCP toolkit's tool list (0: off). New upstream tools "
        "arrive pending, vanished ones are disabled, changed ones go back to pending; a "
        "`tools/list_changed` notification from a pooled session and `toolspoke sync` re-sync too.",
    )
    imports_per_hour: int = _setting(
        "TOOLSPOKE_IMPORTS_PER_HOUR",
        10,
        values.non_negative(int),
        "Imports one user may start through the admin API per sliding hour (the CLI is not limited); the "
        "next one is refused (HTTP 429, `rate_limited`) with `retry_after_s`, the seconds to wait.",
    )
    # -- spend, limits and storage (ledger/, gateway/accounting.py, db/) -----------------------
    default_fee: float = _setting(
        "TOOLSPOKE_DEFAULT_FEE",
        1.0,
        values.non_negative(float),
        "Credits a non-owner call to a toolkit costs when its owner set no fee (at most 3 decimals; 0: "
        "free).",
    )
    rate_limit: int = _setting(
        "TOOLSPOKE_RATE_LIMIT",
        120,
        values.positive(int),
        "Tool calls one agent (or, without an agent, one key) may make per `TOOLSPOKE_RATE_LIMIT_WINDOW_S`: "
        "a burst of this many, then an even trickle (GCRA). Beyond it: `-32001` with `retry_after_s`.",
    )
    rate_limit_window_s: float = _setting(
        "TOOLSPOKE_RATE_LIMIT_WINDOW_S",
        60.0,
        values.positive(float),
        "The period, in seconds, that `TOOLSPOKE_RATE_LIMIT` and `TOOLSPOKE_BROWSE_RATE_LIMIT` count over.",
    )
    browse_rate_limit: int = _setting(
        "TOOLSPOKE_BROWSE_RATE_LIMIT",
        600,
        values.positive(int),
        "search_tools, list_toolkits, describe_tools and read_guide calls, and the MCP methods "
        "`tools/list`, `initialize`, `ping`, `server/discover` and `logging/setLevel`, one identity may "
        "make per window: free and unaudited, but limited so nobody can flood the gateway.",
    )
    audit_retention_days: float = _setting(
        "TOOLSPOKE_AUDIT_RETENTION_DAYS",
        90.0,
        values.non_negative(float),
        "Days an audit row (call history) is kept; older rows are pruned hourly. 0 keeps them forever. "
        "Ledger entries are never pruned: balances derive from them.",
    )
    db_synchronous: str = _setting(
        "TOOLSPOKE_DB_SYNCHRONOUS",
        "FULL",
        values.synchronous,
        "SQLite `synchronous` for every write: FULL (each commit, charges and audit rows included, is on "
        "disk before a call is answered: survives power loss) or NORMAL (survives kill -9 and crashes of "
        "the process, but a power loss or OS crash may drop the last commits; calls answer ~an fsync "
        "sooner).",
    )
    min_free_disk_bytes: int = _setting(
        "TOOLSPOKE_MIN_FREE_DISK_BYTES",
        32 * 1024 * 1024,
        values.positive(int),
        "Free space (for an unprivileged user, as `df` shows it) the data directory's disk must keep for "
        "tool calls to be sent. Below it, every tool call is refused before anything leaves (-32003 "
        "`storage_unavailable`, `data.sent: false`, nothing charged) and `/readyz` answers 503 until "
        "space returns; so are calls after a failed database write until a probe write succeeds.",
    )
    idempotency_retention_h: float = _setting(
        "TOOLSPOKE_IDEMPOTENCY_RETENTION_H",
        24.0,
        values.at_least(24.0),
        "Hours an idempotency key (`_meta` `toolspoke/idempotencyKey` on tools/call) and its stored "
        "result are kept; older keys are pruned and may be used again. At least 24.",
    )
    # -- large results kept aside (gateway/artifacts.py; docs/results.md) -----------------------
    artifact_threshold_bytes: int = _setting(
        "TOOLSPOKE_ARTIFACT_THRESHOLD_BYTES",
        16384,
        values.non_negative(int),
        "A bridge tool call's result larger than this (bytes of its content as JSON) is kept aside: "
        "the answer carries its head and a handle that `read_result` reads a range, lines, matching "
        "lines or a JSON path of; also the most one `read_result` answer gives. 0 never keeps "
        "results (they are answered whole, up to the response cap).",
    )
    artifact_head_bytes: int = _setting(
        "TOOLSPOKE_ARTIFACT_HEAD_BYTES",
        4096,
        values.positive(int),
        "Bytes of a kept result's text given in its answer (at most the threshold).",
    )
    artifact_owner_bytes: int = _setting(
        "TOOLSPOKE_ARTIFACT_OWNER_BYTES",
        64 * 1024 * 1024,
        values.positive(int),
        "Bytes one caller's (agent's or user's) kept results may hold together; its oldest are "
        "evicted to make room for a new one.",
    )
    artifact_total_bytes: int = _setting(
        "TOOLSPOKE_ARTIFACT_TOTAL_BYTES",
        1024 * 1024 * 1024,
        values.positive(int),
        "Bytes all kept results may hold together; past it a new result is not kept (its answer "
        "says so and still carries its head) rather than evicting another caller's.",
    )
    artifact_retention_h: float = _setting(
        "TOOLSPOKE_ARTIFACT_RETENTION_H",
        24.0,
        values.positive(float),
        "Hours a kept result can be read; expired ones are pruned as new ones are stored and at start.",
    )
    metrics_key: Secret | None = _setting(
        "TOOLSPOKE_METRICS_KEY",
        None,
        values.metrics_key,
        "A bearer key (16 characters or more) for `/metrics` (a scraper's, so it needs no admin key). "
        "When set, `/metrics` needs it or an admin key; unset, `/metrics` is open on a loopback bind and "
        "needs an admin key on any other.",
    )
    # -- the demo toolkit and logging ----------------------------------------------------------
    demo: bool = _setting(
        "TOOLSPOKE_DEMO",
        True,
        values.boolean,
        "Serve the built-in demo API and install it as the `demo` toolkit, so that a fresh appliance has "
        "a tool whose calls really work with no internet, on every face (`/mcp`, `toolspoke stdio`, "
        "`toolspoke call`), with or without `serve` running.",
    )
    log_level: str = _setting(
        "TOOLSPOKE_LOG_LEVEL",
        "INFO",
        values.upper,
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
