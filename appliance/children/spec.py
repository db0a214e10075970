"""What a stdio MCP server is allowed to be: its definition, the operator's policy, the check.

``check_spec`` is the gate every definition passes before anything is spawned (an import
checks it too): an allow-listed executable, no NUL bytes, valid environment names, a
working directory inside the policy's root. ``State`` is a ``StdioProcess``'s lifecycle.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from appliance.children.sandbox import Sandbox
from appliance.errors import InvalidParams
from appliance.secret import Secret

DEFAULT_ALLOWED_EXECUTABLES: tuple[str, ...] = ("npx", "uvx", "node", "python3", "python", "deno")
DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class StdioSpecRejected(InvalidParams):
    """A stdio server definition the gateway refuses to run; ``field`` names the culprit."""


class ProxyHandle(Protocol):
    """A running egress proxy for one sandboxed server (``egress/connect_proxy.py``)."""

    @property
    def path(self) -> Path: ...

    @property
    def refused(self) -> list[str]: ...

    async def aclose(self) -> None: ...


class EgressProxies(Protocol):
    """What serves a sandboxed server's allowed hosts: a CONNECT proxy on a unix socket at
    ``path``, admitting ``hosts`` through the egress guard (the gateway passes the egress
    part's; the children may not import it)."""

    async def serve(
        self, owner: str, hosts: Sequence[str], path: Path, *, uid: int | None = None
    ) -> ProxyHandle: ...


class State(enum.StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    RUNNING = "running"
    CRASHED = "crashed"


@dataclass(frozen=True)
class StdioPolicy:
    """Operator settings for every stdio server, passed in by the caller (config reads env).

    ``base_env`` is the minimal inherited environment (e.g. PATH and HOME, from
    ``config.environment_snapshot``); ``workdir_root`` is the directory every child's cwd
    must lie in (a folder of the data directory).
    """

    workdir_root: Path
    base_env: Mapping[str, str] = field(default_factory=dict)
    allowed_executables: tuple[str, ...] = DEFAULT_ALLOWED_EXECUTABLES
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    stderr_lines: int = 50
    write_timeout_s: float = 10.0
    close_grace_s: float = 2.0  # stdin closed → SIGTERM
    term_grace_s: float = 3.0  # SIGTERM → SIGKILL
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 60.0
    stable_after_s: float = 30.0  # a child that lived this long resets the back-off
    # The confinement of every child (``sandbox.py``); None runs them as plain processes,
    # or, with ``sandbox_refusal`` set (the operator requires one), refuses to run them.
    sandbox: Sandbox | None = None
    sandbox_refusal: str = ""
    # The sandboxed servers' way out (allowed hosts, package installs); None: none at all.
    egress: EgressProxies | None = None
    # What a package install may reach (registry hosts), besides the registry the
    # child's own environment names (``registry_hosts``).
    install_hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class StdioSpec:
    """One toolkit's server: what to run, with which environment, where, and for how long.

    ``cwd`` is relative to the policy's ``workdir_root`` (or absolute inside it); empty
    means ``<workdir_root>/<name>``. It is created on start.
    """

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    idle_timeout_s: float = 600.0
    start_timeout_s: float = 60.0
    # Vault-held variables (a token the server reads from its environment): added to the
    # child's environment only, and redacted from its stderr in the log and in errors.
    secret_env: Mapping[str, Secret] = field(default_factory=dict)
    # The toolkit's response cap: a longer stdout line is allowed up to it when it is above
    # the policy's line limit (a cap below that limit is checked on the call's result).
    max_line_bytes: int | None = None
    # The toolkit whose private HOME (and caches) the sandboxed child gets; empty: the
    # process name. An import's trial run uses the toolkit's, so what it installs stays.
    home: str = ""
    # Hosts (host, host:port, *.domain) the sandboxed server may reach through the egress
    # proxy; empty: no network at all. Checked by the proxy (``egress/connect_proxy.py``).
    allow_hosts: tuple[str, ...] = ()


def check_spec(name: str, spec: StdioSpec, policy: StdioPolicy) -> Path:
    """Refuse a spec the gateway must not run; return the resolved working directory."""
    if not _SAFE_NAME.fullmatch(name):
        raise StdioSpecRejected(f"invalid stdio server name {name!r}", field="name")
    command = spec.command
    if not command or "\0" in command or (os.sep in command and not os.path.isabs(command)):
        raise StdioSpecRejected("command must be a program name or an absolute path", field="command")
    if os.path.basename(command) not in policy.allowed_executables:
        allowed = ", ".join(policy.allowed_executables)
        raise StdioSpecRejected(
            f"command {os.path.basename(command)!r} is not an allowed executable (allowed: {allowed})",
            field="command",
        )
    if any(not isinstance(a, str) or "\0" in a for a in spec.args):
        raise StdioSpecRejected("arguments must be strings without NUL bytes", field="args")
    for key, value in spec.env.items():
        if not _ENV_NAME.fullmatch(key) or not isinstance(value, str) or "\0" in value:
            raise StdioSpecRejected(f"invalid environment variable {key!r}", field="env")
    for key in spec.secret_env:
        if not _ENV_NAME.fullmatch(key):
            raise StdioSpecRejected(f"invalid environment variable {key!r}", field="env")
    if spec.idle_timeout_s <= 0 or spec.start_timeout_s <= 0:
        raise StdioSpecRejected("timeouts must be positive", field="idle_timeout_s")
    if any(not isinstance(h, str) or not h or len(h) > 260 for h in spec.allow_hosts):
        raise StdioSpecRejected("allowed hosts must be host patterns", field="allow_hosts")
    if spec.home and not _SAFE_NAME.fullmatch(spec.home):
        raise StdioSpecRejected(f"invalid toolkit home {spec.home!r}", field="home")
    root = policy.workdir_root.resolve()
    cwd = (root / (spec.cwd or name)).resolve()  # an absolute spec.cwd replaces root here
    if cwd != root and root not in cwd.parents:
        raise StdioSpecRejected(f"cwd must lie inside {root}", field="cwd")
    return cwd


# The variables naming a package registry or index: their hosts are open to an install.
REGISTRY_VARIABLES = (
    "npm_config_registry",
    "NPM_CONFIG_REGISTRY",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "PIP_INDEX_URL",
)
_URL_HOST = re.compile(r"^https?://(?:[^/@]*@)?(\[[^\]/]+\]|[^/:?#]+)(?::(\d{1,5}))?", re.IGNORECASE)


def registry_hosts(env: Mapping[str, str]) -> list[str]:
    """``host:port`` of each registry URL in ``env`` (an install may reach those too)."""
    hosts = []
    for name in REGISTRY_VARIABLES:
        match = _URL_HOST.match(env.get(name, ""))
        if match:
            https = env[name][:5].lower() == "https"
            hosts.append(f"{match[1]}:{match[2] or (443 if https else 80)}")
    return hosts
