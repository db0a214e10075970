"""Plain dataclasses passed between rooms. No I/O here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["read", "write", "destructive"]
KINDS: tuple[Kind, ...] = ("read", "write", "destructive")
RUNNER_FOR_KIND: dict[str, str] = {
    "read": "use_tool",
    "write": "run_tool",
    "destructive": "run_destructive_tool",
}


@dataclass(frozen=True)
class ParamBinding:
    """Where one tool input goes in the HTTP request."""

    arg: str  # property name in the tool's input schema
    name: str  # name on the wire
    location: Literal["path", "query", "header", "cookie"]
    style: str | None = None
    explode: bool | None = None


@dataclass(frozen=True)
class HttpBinding:
    """How an OpenAPI operation is called: stored as JSON in ``tools.binding``."""

    method: str
    path: str
    params: tuple[ParamBinding, ...] = ()
    body_arg: str | None = None  # property holding the request body
    body_media_type: str | None = None  # application/json, application/x-www-form-urlencoded, ...
    body_fields: tuple[str, ...] = ()  # form fields flattened into the tool input, if any


@dataclass(frozen=True)
class ToolDraft:
    """A tool as a converter produces it, before it is stored."""

    name: str  # <slug>__<action>, at most 64 characters
    upstream_name: str  # operationId, MCP tool name or catalogue name, verbatim
    group: str  # OpenAPI tag or the catalogue's own toolkit name
    title: str
    description: str
    kind: Kind
    input_schema: dict[str, Any]
    binding: dict[str, Any] | None = None
    annotations: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Skipped:
    where: str  # "GET /pets/{id}" or "line 12"
    reason: str


@dataclass
class ToolkitDraft:
    """What an import produces: a toolkit and its tools, ready to store."""

    slug: str
    source_kind: Literal["openapi", "catalog", "mcp", "lore"]
    title: str
    description: str
    guide: str
    base_url: str | None
    tools: list[ToolDraft]
    skipped: list[Skipped] = field(default_factory=list)
    source: str = ""  # file path or URL it came from
    meta: dict[str, Any] = field(default_factory=dict)  # version, security schemes, ...
    connection: dict[str, Any] | None = None  # how to reach an MCP upstream; never secrets


@dataclass(frozen=True)
class Toolkit:
    id: int
    slug: str
    project: str
    source_kind: str
    title: str
    description: str
    guide: str
    base_url: str | None
    source: str
    tool_count: int
    created_at: str
    updated_at: str
    # Upstream health (see gateway/health_machine.py); catalogue toolkits stay "active".
    health: str = "active"
    health_reason: str = ""
    health_changed_at: str | None = None
    # Who may see it (see access/visibility.py): owner (None: the platform's, i.e. every
    # admin's), private or published, and whether it is a platform default for agents.
    owner_id: int | None = None
    visibility: str = "private"
    is_default: bool = False
    # A stdio toolkit's hosts its sandbox may reach through the egress guard (none: no network).
    allowed_hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tool:
    id: int
    toolkit_id: int
    name: str
    toolkit: str
    project: str
    upstream_name: str
    group: str
    title: str
    description: str
    kind: Kind
    input_schema: dict[str, Any]
    binding: dict[str, Any] | None
    annotations: dict[str, Any]
    source_kind: str
    base_url: str | None
    health: str = "active"  # its toolkit's upstream health

    @property
    def runner(self) -> str:
        return RUNNER_FOR_KIND[self.kind]


@dataclass(frozen=True)
class SearchHit:
    tool: Tool
    score: float


@dataclass(frozen=True)
class Principal:
    """Who is calling, as the credential says (never a header or a session).

    A user's own key has ``agent_id`` None; an agent's key acts for ``user_id`` as that agent.
    ``operator`` is the CLI run without a key by whoever owns the data directory: it sees
    everything. ``anonymous`` is a caller without a key on a published toolkit's endpoint:
    it may list that toolkit's tools but never call one.
    """

    user_id: int
    name: str
    is_admin: bool
    key_prefix: str
    agent_id: int | None = None
    agent_name: str | None = None
    preload: tuple[str, ...] = ()  # tool names its sessions get in tools/list (within its scope)
    operator: bool = False
    anonymous: bool = False
    read_only: bool = False  # the key or its agent is read-only: read tools only (issue 20)
    # A narrower key (issue 20): a subset of what its agent may call (``access/visibility.py``
    # reads it by the key's prefix) and a budget of its own in millicredits (None: none).
    narrowed: bool = False
    budget: int | None = None


@dataclass(frozen=True)
class Scope:
    """What one principal may see and call (as SQL: ``db/scope_sql.py``).

    ``toolkits`` None means everything. Otherwise a toolkit is visible when its id is in
    ``toolkits``; a tool when its toolkit is visible, it is active, and, when its toolkit is
    in ``restricted``, its id is in that toolkit's set. Computed by ``access/visibility.py``.

    A scope narrowed to what could run (``gateway/policy.runnable_in``: search, list,
    describe) also keeps only tools of ``kinds`` (None: every kind) and none in ``denied``
    (the tools a call policy refuses). ``sees_tool`` is access alone, as resolve is.
    """

    toolkits: frozenset[int] | None
    restricted: Mapping[int, frozenset[int]] = field(default_factory=dict)
    kinds: frozenset[str] | None = None
    denied: frozenset[int] = frozenset()

    @property
    def unrestricted(self) -> bool:
        return self.toolkits is None

    def sees_toolkit(self, toolkit_id: int) -> bool:
        return self.toolkits is None or toolkit_id in self.toolkits

    def sees_tool(self, toolkit_id: int, tool_id: int) -> bool:
        if not self.sees_toolkit(toolkit_id):
            return False
        only = self.restricted.get(toolkit_id)
        return only is None or tool_id in only


EVERYTHING = Scope(toolkits=None)
# Whoever runs the CLI without a key on the data directory: sees and runs everything.
OPERATOR = Principal(user_id=0, name="operator", is_admin=True, key_prefix="cli", operator=True)
# A caller without a key on a published toolkit's own endpoint (may list, never call).
ANONYMOUS = Principal(user_id=0, name="anonymous", is_admin=False, key_prefix="", anonymous=True)


@dataclass(frozen=True)
class CallResult:
    """An upstream answer turned into MCP tool-result parts."""

    content: list[dict[str, Any]]
    structured: Any = None
    is_error: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
