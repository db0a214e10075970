"""Plain dataclasses passed between rooms. No I/O here."""

from __future__ import annotations

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
    source_kind: Literal["openapi", "catalog", "mcp"]
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
    # Upstream health (see upstream/health.py); catalogue toolkits stay "active".
    health: str = "active"
    health_reason: str = ""
    health_changed_at: str | None = None


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
    """Who is calling. Issue-4 work (agents, grants) extends this."""

    user_id: int
    name: str
    is_admin: bool
    key_prefix: str


@dataclass(frozen=True)
class CallResult:
    """An upstream answer turned into MCP tool-result parts."""

    content: list[dict[str, Any]]
    structured: Any = None
    is_error: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
