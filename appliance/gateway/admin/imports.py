"""Imports as a person makes them from a form: a dry run first, then "save" of exactly that.

A dry run (``preview_openapi``, ``preview_mcp``) fetches the spec or lists the server's tools
(through the egress guard, or the stdio sandbox, as every import) and stores nothing in the
catalogue; what it was given is kept as a *draft*, here in this process, bound to the
session that asked (an opaque ``holder``: the digest of its session token), for
``DRAFT_TTL_S``. ``save`` takes the draft back (once) and imports it: an OpenAPI spec from
the very bytes the dry run read, an MCP server listed again and refused unless its tools are
the ones the dry run showed (``imports.import_mcp``'s ``expect``). The client never hands in
a list of tools; a draft of another session, or an expired one, is not found.

Who may: any person imports what they will own (the hourly import limit counts saves, not
dry runs); a local command runs on this machine, so only an admin imports one (the admin
API never does). ``mcp_json_connection`` reads one server of a ``.mcp.json`` (the CLI's
``--config`` reads it the same way).
"""

from __future__ import annotations

import hashlib
import secrets
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from appliance.access import principals
from appliance.errors import ApplianceError, ImportFailed, InvalidParams, NotFound, UpstreamError
from appliance.gateway import examples_import, imports, lore, redaction
from appliance.gateway.admin.projects import check_project
from appliance.models import RUNNER_FOR_KIND, Principal

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime

DRAFT_TTL_S = 15 * 60
DRAFTS_MAX = 64  # in this process, every session's together
DRAFT_BYTES_MAX = 64 * 1024 * 1024  # the specs they hold, together
PER_HOLDER_MAX = 4
TEXT_MAX = 2_000
ARGS_MAX = 64


@dataclass
class Draft:
    """What a dry run was given, to import on "save": never the tools it listed."""

    holder: str
    key_prefix: str
    kind: str  # openapi, mcp, lore or examples
    slug: str
    project: str
    source: str = ""
    data: bytes | None = None
    base_url: str | None = None
    connection: dict[str, Any] = field(default_factory=dict)
    approve_new: bool = False
    fingerprint: str | None = None
    title: str | None = None  # lore
    skip_unreadable: bool = False  # lore
    fmt: str = "auto"  # examples
    made: float = field(default_factory=time.monotonic)


class Drafts:
    """The drafts of one runtime: bounded in count and bytes, oldest evicted, expiring."""

    def __init__(self) -> None:
        self._held: OrderedDict[str, Draft] = OrderedDict()

    def _sweep(self, now: float) -> None:
        for key in [k for k, d in self._held.items() if now - d.made > DRAFT_TTL_S]:
            del self._held[key]

    def put(self, draft: Draft) -> str:
        now = time.monotonic()
        self._sweep(now)
        mine = [k for k, d in self._held.items() if d.holder == draft.holder]
        for key in mine[: max(0, len(mine) - PER_HOLDER_MAX + 1)]:
            del self._held[key]
        while self._held and (
            len(self._held) >= DRAFTS_MAX
            or sum(len(d.data or b"") for d in self._held.values()) + len(draft.data or b"") > DRAFT_BYTES_MAX
        ):
            self._held.popitem(last=False)
        key = secrets.token_urlsafe(18)
        self._held[key] = draft
        return key

    def take(self, key: str, holder: str) -> Draft:
        """The draft, removed (a save is made once); another holder's is not found."""
        self._sweep(time.monotonic())
        draft = self._held.get(key) if isinstance(key, str) else None
        if draft is None or not secrets.compare_digest(draft.holder, holder):
            raise NotFound(
                "no such dry run: it has expired or was saved already; run the dry run again",
                field="draft",
            )
        del self._held[key]
        return draft

    def give_back(self, key: str, draft: Draft) -> None:
        """A save that failed (a slug taken, a base URL missing) leaves its draft to retry."""
        self._held[key] = draft


_DRAFTS: weakref.WeakKeyDictionary[Runtime, Drafts] = weakref.WeakKeyDictionary()


def drafts(rt: Runtime) -> Drafts:
    found = _DRAFTS.get(rt)
    if found is None:
        found = _DRAFTS[rt] = Drafts()
    return found


def holder_of(session_token: str) -> str:
    """The opaque name a session's drafts are held under (never the token itself)."""
    return hashlib.sha256(b"toolspoke import draft\x00" + session_token.encode()).hexdigest()


def _preview(report: imports.ImportReport) -> dict[str, Any]:
    out = report.as_dict()
    out["tools"] = [{**t, "runner": RUNNER_FOR_KIND[t["kind"]]} for t in out["tools"]]
    return out


def _text(value: str | None, field_name: str, *, required: bool = False) -> str:
    text = (value or "").strip()
    if required and not text:
        raise InvalidParams(f"'{field_name}' is required", field=field_name)
    if len(text) > TEXT_MAX or not text.isprintable():
        raise InvalidParams(
            f"'{field_name}' must be printable text of at most {TEXT_MAX} characters", field=field_name
        )
    return text


def _renamed(exc: ImportFailed | UpstreamError | InvalidParams, names: dict[str, str]) -> None:
    if exc.field in names:
        exc.field = names[exc.field]


async def preview_openapi(
    rt: Runtime,
    actor: Principal,
    holder: str,
    *,
    slug: str,
    project: str,
    url: str | None = None,
    data: bytes | None = None,
    base_url: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """A dry run of an OpenAPI import (a spec by URL, or its bytes): the draft's key and the
    report (tools with name, kind, runner, title and description; skipped with why)."""
    principals.require_person(actor)
    slug, project = _text(slug, "slug", required=True), check_project(_text(project, "project") or "default")
    url, base = _text(url, "url"), _text(base_url, "base_url") or None
    if (data is None) == (not url):
        raise InvalidParams(
            "'url': give the spec's URL, or upload or paste the spec (one of the three)", field="url"
        )
    source = url or "console upload"
    try:
        if data is None:
            async with redaction.redacting(rt):
                data = await imports.read_source(rt, url)
        report = await imports.import_openapi(
            rt, source, slug=slug, project=project, base_url=base, dry_run=True, data=data, importer=actor
        )
    except (ImportFailed, UpstreamError, InvalidParams) as exc:
        _renamed(exc, {"source": "url"})
        raise
    draft = Draft(holder, actor.key_prefix, "openapi", slug, project, source=source, data=data, base_url=base)
    return drafts(rt).put(draft), _preview(report)


async def preview_mcp(
    rt: Runtime,
    actor: Principal,
    holder: str,
    *,
    slug: str,
    project: str,
    connection: dict[str, Any],
    approve_new: bool = False,
) -> tuple[str, dict[str, Any]]:
    """A dry run of an MCP import: connect (a URL through the egress guard, a command in the
    sandbox), list the tools, store nothing. A local command is an admin's to run."""
    principals.require_person(actor)
    if connection.get("transport") == "stdio":
        principals.require_admin(actor)
    slug, project = _text(slug, "slug", required=True), check_project(_text(project, "project") or "default")
    report = await imports.import_mcp(
        rt, connection, slug=slug, project=project, dry_run=True, approve_new=approve_new, importer=actor
    )
    draft = Draft(
        holder,
        actor.key_prefix,
        "mcp",
        slug,
        project,
        connection=connection,
        approve_new=approve_new,
        fingerprint=report.fingerprint,
    )
    return drafts(rt).put(draft), _preview(report)


async def preview_lore(
    rt: Runtime,
    actor: Principal,
    holder: str,
    *,
    slug: str,
    project: str,
    data: bytes | None,
    title: str = "",
    skip_unreadable: bool = False,
) -> tuple[str, dict[str, Any]]:
    """A dry run of a Lore import from an uploaded archive (``lore.import_lore``, as the API):
    the documents it would index (path, title, format, chunks) and the files it cannot read
    with why; nothing stored. Saving imports the very bytes the dry run read."""
    principals.require_person(actor)
    slug, project = _text(slug, "slug", required=True), check_project(_text(project, "project") or "default")
    if not data:
        raise InvalidParams(
            "'archive' is required: upload a .zip or .tar(.gz) of the documents", field="archive"
        )
    try:
        report = await lore.import_lore(
            rt,
            "console upload",
            slug=slug,
            project=project,
            data=data,
            dry_run=True,
            skip_unreadable=skip_unreadable,
            importer=actor,
            title=_text(title, "title") or None,
        )
    except (ImportFailed, InvalidParams) as exc:
        _renamed(exc, {"source": "archive"})
        raise
    draft = Draft(
        holder,
        actor.key_prefix,
        "lore",
        slug,
        project,
        source="console upload",
        data=data,
        title=_text(title, "title") or None,
        skip_unreadable=skip_unreadable,
    )
    return drafts(rt).put(draft), _preview(report)


async def preview_examples(
    rt: Runtime,
    actor: Principal,
    holder: str,
    *,
    slug: str,
    project: str,
    data: bytes | None,
    field_name: str,
    fmt: str = "auto",
    base_url: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """A dry run of tools inferred from examples (``examples_import``, as the API: an admin's):
    each tool with its method, path, parameters, what it was inferred from and whether the
    naming model named it; nothing stored. ``field_name``: the form field the examples came
    from, which a refusal of the examples names (the message says which line or entry)."""
    principals.require_person(actor)
    slug, project = _text(slug, "slug", required=True), check_project(_text(project, "project") or "default")
    if not data:
        raise InvalidParams(
            "'examples' is required: paste curl lines or HTTP pairs, or upload a HAR file", field="examples"
        )
    base = _text(base_url, "base_url") or None
    fmt = _text(fmt, "format") or "auto"
    try:
        report = await examples_import.import_examples(
            rt,
            "console",
            slug=slug,
            project=project,
            fmt=fmt,
            base_url=base,
            dry_run=True,
            data=data,
            importer=actor,
        )
    except (ImportFailed, UpstreamError, InvalidParams) as exc:
        _examples_field(exc, field_name)
        raise
    draft = Draft(
        holder,
        actor.key_prefix,
        "examples",
        slug,
        project,
        source="console",
        data=data,
        base_url=base,
        fmt=fmt,
        fingerprint=report.fingerprint,
    )
    return drafts(rt).put(draft), _preview(report)


_EXAMPLES_FIELDS = ("slug", "project", "format", "base_url")


def _examples_field(exc: ImportFailed | UpstreamError | InvalidParams, field_name: str) -> None:
    """An examples refusal names a line or an entry of the examples (its message says which):
    on a form, that is the field they came from."""
    if exc.field not in _EXAMPLES_FIELDS:
        exc.field = field_name


async def save(rt: Runtime, actor: Principal, holder: str, key: str) -> dict[str, Any]:
    """Import what the dry run ``key`` of this session previewed; the import report."""
    principals.require_person(actor)
    draft = drafts(rt).take(key, holder)
    if draft.key_prefix != actor.key_prefix:  # the session now acts through another key
        raise NotFound("no such dry run: run the dry run again", field="draft")
    try:
        return await _import(rt, actor, draft)
    except ApplianceError:
        drafts(rt).give_back(key, draft)
        raise


async def _import(rt: Runtime, actor: Principal, draft: Draft) -> dict[str, Any]:
    if draft.kind == "lore":
        try:
            report = await lore.import_lore(
                rt,
                draft.source,
                slug=draft.slug,
                project=draft.project,
                data=draft.data,
                skip_unreadable=draft.skip_unreadable,
                importer=actor,
                title=draft.title,
            )
        except (ImportFailed, InvalidParams) as exc:
            _renamed(exc, {"source": "archive"})
            raise
    elif draft.kind == "examples":
        try:
            report = await examples_import.import_examples(
                rt,
                draft.source,
                slug=draft.slug,
                project=draft.project,
                fmt=draft.fmt,
                base_url=draft.base_url,
                data=draft.data,
                importer=actor,
                expect=draft.fingerprint,
            )
        except (ImportFailed, UpstreamError, InvalidParams) as exc:
            _examples_field(exc, "examples")
            raise
    elif draft.kind == "openapi":
        report = await imports.import_openapi(
            rt,
            draft.source,
            slug=draft.slug,
            project=draft.project,
            base_url=draft.base_url,
            data=draft.data,
            importer=actor,
        )
    else:
        if draft.connection.get("transport") == "stdio":
            principals.require_admin(actor)
        report = await imports.import_mcp(
            rt,
            draft.connection,
            slug=draft.slug,
            project=draft.project,
            approve_new=draft.approve_new,
            importer=actor,
            expect=draft.fingerprint,
        )
    return _preview(report)


def lines(text: str, field_name: str) -> list[str]:
    """One value a line (a command's arguments): blank lines dropped, bounded."""
    found = [line.strip() for line in text.replace("\r\n", "\n").split("\n") if line.strip()]
    if len(found) > ARGS_MAX:
        raise InvalidParams(f"'{field_name}' takes at most {ARGS_MAX} lines", field=field_name)
    return found


def env_lines(text: str, field_name: str = "env") -> dict[str, str]:
    """NAME=value, one a line."""
    env: dict[str, str] = {}
    for number, line in enumerate(lines(text, field_name), 1):
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            raise InvalidParams(f"'{field_name}' line {number} must read NAME=value", field=field_name)
        env[name.strip()] = value
    return env


def mcp_json_connection(raw: bytes, server: str | None, *, field_name: str = "mcp_json") -> dict[str, Any]:
    """One server of a ``.mcp.json`` / Claude Desktop ``mcpServers`` block, as a connection
    (``imports.mcp_connection``); ``server`` picks one when it lists several."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ImportFailed(f"'{field_name}' is not valid JSON: {exc}", field=field_name) from None
    servers = doc.get("mcpServers") if isinstance(doc, dict) else None
    if not isinstance(servers, dict) or not servers:
        raise ImportFailed(f"'{field_name}' has no 'mcpServers' object", field=field_name)
    if not server:
        if len(servers) != 1:
            names = ", ".join(sorted(str(n) for n in servers))[:500]
            raise ImportFailed(
                f"'{field_name}' lists several servers ({names}); pick one in 'server'", field="server"
            )
        server = next(iter(servers))
    entry = servers.get(server)
    if not isinstance(entry, dict):
        raise ImportFailed(f"'{field_name}' has no server named {server[:100]!r}", field="server")
    if isinstance(entry.get("url"), str):
        kind = entry.get("type")
        transport = str(kind) if kind in ("sse", "http") else "auto"
        return imports.mcp_connection(url=entry["url"], transport=transport)
    command = entry.get("command")
    if not isinstance(command, str) or not command:
        raise ImportFailed(f"server {server[:100]!r} has neither 'url' nor 'command'", field=field_name)
    raw_args = entry.get("args") or []
    raw_env = entry.get("env") or {}
    if not isinstance(raw_args, list) or not isinstance(raw_env, dict):
        raise ImportFailed(
            f"server {server[:100]!r}: 'args' must be a list and 'env' an object", field=field_name
        )
    return imports.mcp_connection(
        command=command, args=[str(a) for a in raw_args], env={str(k): str(v) for k, v in raw_env.items()}
    )
