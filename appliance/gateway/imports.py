"""Imports: fetch → convert → store → index, in one transaction (all or nothing)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from appliance.access import grants, limits
from appliance.catalogue import store, sync_store
from appliance.catalogue.catalog_jsonl import convert_catalog
from appliance.catalogue.mcp_listing import convert_tools_list
from appliance.catalogue.naming import validate_slug
from appliance.catalogue.openapi import convert_openapi
from appliance.catalogue.screening import visible
from appliance.catalogue.spec_loader import parse_document
from appliance.catalogue.sync import ToolState
from appliance.children.processes import StdioSpec, check_spec
from appliance.db import WriteTx
from appliance.egress.connect_proxy import parse_patterns
from appliance.errors import ApplianceError, ImportFailed, UpstreamError
from appliance.gateway import demo_api, redaction, screening
from appliance.gateway.credentials import CredentialInput, parse_credential, store_credential, to_auth
from appliance.gateway.runtime import Runtime
from appliance.gateway.sync import index_ids
from appliance.models import Principal, ToolDraft, ToolkitDraft
from appliance.search import fts
from appliance.secret import Redactor

log = logging.getLogger(__name__)
NO_BASE_URL = "the spec names no absolute server URL"


@dataclass
class ImportReport:
    slug: str
    project: str
    source: str
    base_url: str | None
    dry_run: bool
    tools: list[dict[str, Any]]
    skipped: list[dict[str, str]]
    replaced: bool = False
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    changes: dict[str, Any] | None = None  # a replace: added, changed, removed, returned, pending
    held: list[dict[str, Any]] = field(default_factory=list)  # pending for what screening found
    documents: dict[str, Any] | None = None  # a Lore import: documents added, changed, removed, kept
    fingerprint: str | None = None  # an MCP import: the tools listed (``listing_fingerprint``)

    def as_dict(self) -> dict[str, Any]:
        return {
            "slug": self.slug,
            "project": self.project,
            "source": self.source,
            "base_url": self.base_url,
            "dry_run": self.dry_run,
            "replaced": self.replaced,
            "tool_count": len(self.tools),
            "tools": self.tools,
            "skipped": self.skipped,
            "notes": self.notes,
            "held": self.held,
            **({"changes": self.changes} if self.changes is not None else {}),
            **({"documents": self.documents} if self.documents is not None else {}),
            **({"fingerprint": self.fingerprint} if self.fingerprint is not None else {}),
            "seconds": round(self.seconds, 3),
        }

    def apply(self, stored: _Stored) -> None:
        self.replaced, self.changes, self.held = stored.replaced, stored.changes, stored.held
        if self.held:
            self.notes.append(
                f"{len(self.held)} tool(s) held pending by screening: see `toolspoke pending {self.slug}`"
            )


async def read_source(rt: Runtime, source: str) -> bytes:
    """A local file, or an http(s) URL fetched through the egress guard."""
    limit = rt.settings.import_max_bytes
    if source.startswith(("http://", "https://")):
        rt.egress.check_url(source, field="source")
        try:
            return await rt.egress.fetch_document(source, max_bytes=limit)
        except UpstreamError as exc:
            # Name the member the caller gave (a name resolving to a refused address, say).
            if exc.field in (None, "url"):
                exc.field = "source"
            raise
    return await asyncio.to_thread(_read_file, source, limit)


def _read_file(source: str, limit: int) -> bytes:
    path = Path(source).expanduser()
    try:
        size = path.stat().st_size
        if size > limit:
            raise ImportFailed(
                f"{source} is {size} bytes, over the import limit of {limit} bytes", field="source"
            )
        return path.read_bytes()
    except FileNotFoundError:
        raise ImportFailed(f"no such file: {source}", field="source") from None
    except IsADirectoryError:
        raise ImportFailed(f"{source} is a directory, not a file", field="source") from None
    except PermissionError:
        raise ImportFailed(f"cannot read {source}: permission denied", field="source") from None


async def count_import(rt: Runtime, importer: Principal | None) -> None:
    """The hourly import limit, counted before any fetching (the operator's CLI is not limited)."""
    if importer is None or importer.operator:
        return
    async with rt.db.write() as tx:
        await limits.record_import(
            tx, importer.user_id, per_hour=rt.settings.imports_per_hour, now=time.time()
        )


@dataclass
class _Stored:
    replaced: bool
    changes: dict[str, Any] | None = None  # a replace: what it did to the existing tools
    held: list[dict[str, Any]] = field(default_factory=list)


async def store_draft(
    rt: Runtime,
    draft: ToolkitDraft,
    project: str,
    replace: bool,
    *,
    approve_new: bool = False,
    importer: Principal | None = None,
    credential: CredentialInput | None = None,
    also: Callable[[WriteTx, int], Awaitable[None]] | None = None,
) -> _Stored:
    # approve_new: the tools wait as `pending` for an owner's approval, so they stay out of
    # the search index (it holds active tools only) until approved. also: more to write in
    # the same transaction, given the toolkit's id (a Lore toolkit's documents).
    state: ToolState = "pending" if approve_new else "active"
    outcome = _Stored(replaced=False)
    texts = await screening.texts(rt, draft.tools)
    async with rt.db.write() as tx:
        existed = importer is not None and await grants.check_import_target(tx, importer, draft.slug, project)
        found = await screening.with_names(tx, draft.slug, draft.tools, texts)
        kit_id, stored = await store.store_toolkit(
            tx, draft, project=project, replace=replace, state=state, screening=found
        )
        if importer is not None and not existed:
            # A new toolkit belongs to whoever imported it (the CLI's: the platform's).
            await grants.set_owner(tx, kit_id, None if importer.operator else importer.user_id)
        if credential is not None:  # sealed in the same transaction: all or nothing
            await store_credential(tx, rt, kit_id, credential)
        if also is not None:
            await also(tx, kit_id)
        if stored is None:
            # A replace is a re-sync from the fresh import: matched tools keep their ids, so
            # approvals, kind overrides, grants and vectors survive (catalogue/sync.plan_replace).
            # Tools inferred from examples are a guess: a changed one is reviewed again, too.
            approvals = draft.source_kind == "mcp" or bool(draft.meta.get("inferred"))
            plan = await sync_store.replace_tools(
                tx, kit_id, draft.slug, draft.tools, state=state, approvals=approvals, screening=found
            )
            await fts.unindex(tx, plan.leaving_index)
            # Every matched tool was rewritten (and left the index): index what is active now.
            active = await sync_store.stored_tools(tx, kit_id, state="active")
            await index_ids(tx, [t.id for t in active])
            pending = await sync_store.stored_tools(tx, kit_id, state="pending")
            outcome = _Stored(
                replaced=True,
                changes={**plan.as_dict(), "pending": [t.name for t in pending]},
                held=plan.flagged,
            )
            if draft.source_kind == "mcp":
                # The import has just talked to the server: a health verdict on what the
                # toolkit was before (another URL or command, perhaps) does not carry over.
                await store.set_toolkit_health(tx, kit_id, "active", "re-imported: the server answered")
        else:
            outcome.held = screening.held(draft.tools, found)
            flagged = {h["name"] for h in outcome.held}
            await fts.index_tools(
                tx,
                []
                if approve_new
                else [_index_row(draft.slug, i, t) for i, t in stored if t.name not in flagged],
            )
        await fts.optimize(tx)
    await rt.db.checkpoint()
    if outcome.replaced and draft.source_kind == "mcp":
        rt.health.forget(kit_id)  # this process's state goes too; probes judge it afresh
    rt.semantic.wake()  # the background backfill embeds the new tools
    return outcome


def _index_row(slug: str, tool_id: int, t: ToolDraft) -> fts.IndexRow:
    return fts.IndexRow(
        tool_id=tool_id,
        name=t.name,
        toolkit=slug,
        group=t.group,
        upstream_name=t.upstream_name,
        description=visible(t.description),
        input_schema=t.input_schema,
    )


def listing_fingerprint(draft: ToolkitDraft) -> str:
    """A digest of the tools a draft would create, as an owner reviews them."""
    listed = [(t.name, t.kind, t.title, t.description, t.input_schema, t.annotations) for t in draft.tools]
    return hashlib.sha256(orjson.dumps(listed, option=orjson.OPT_SORT_KEYS)).hexdigest()


def draft_report(draft: ToolkitDraft, project: str, dry_run: bool, started: float) -> ImportReport:
    return ImportReport(
        slug=draft.slug,
        project=project,
        source=draft.source,
        base_url=draft.base_url,
        dry_run=dry_run,
        tools=[
            {"name": t.name, "kind": t.kind, "title": t.title, "description": t.description}
            for t in draft.tools
        ],
        skipped=[{"where": s.where, "reason": s.reason} for s in draft.skipped],
        notes=list(draft.meta.get("notes", [])),
        seconds=time.perf_counter() - started,
    )


# A refusal carries the skipped-operations report, bounded: a spec of thousands of broken
# operations must not become an error document of megabytes.
REFUSAL_SKIPPED_MAX = 50


def refuse_empty(draft: ToolkitDraft, lacks: str) -> None:
    """Nothing usable is refused before anything is stored (a replace keeps the old toolkit)."""
    if draft.tools:
        return
    skipped = [{"where": s.where, "reason": s.reason} for s in draft.skipped]
    why = f"all {len(skipped)} skipped" if skipped else "it defines none"
    raise ImportFailed(
        f"nothing to import: {lacks} ({why}); nothing was stored",
        field="document",
        data={"skipped": skipped[:REFUSAL_SKIPPED_MAX], "skipped_count": len(skipped)},
    )


def _convert_openapi(
    raw: bytes, source: str, slug: str, base_url: str | None, max_bytes: int, red: Redactor
) -> ToolkitDraft:
    spec = red.value(parse_document(raw, source=source, max_bytes=max_bytes))
    return convert_openapi(spec, slug, source=source, base_url=base_url)


async def import_openapi(
    rt: Runtime,
    source: str,
    *,
    slug: str,
    project: str = "default",
    base_url: str | None = None,
    dry_run: bool = False,
    replace: bool = False,
    data: bytes | None = None,
    importer: Principal | None = None,
) -> ImportReport:
    """``importer``: the API caller, who will own the toolkit (None: the operator's CLI)."""
    started = time.perf_counter()
    validate_slug(slug)
    validate_slug(project)
    if not dry_run:
        await count_import(rt, importer)
    if base_url is not None:
        rt.egress.check_url(base_url, field="base_url")
    async with redaction.redacting(rt) as red:  # a fetched spec's error text, the spec itself
        raw = data if data is not None else await read_source(rt, source)
        # Parsing and converting a large spec takes a second or more: keep it off the event loop.
        draft = await asyncio.to_thread(
            _convert_openapi, raw, source, slug, base_url, rt.settings.import_max_bytes, red
        )
    refuse_empty(draft, "the spec has no usable operation")
    absolute = draft.base_url if (draft.base_url or "").startswith(("http://", "https://")) else None
    if absolute is not None:
        rt.egress.check_url(absolute, field="base_url")
    elif not dry_run:
        raise ImportFailed(
            f"{NO_BASE_URL}; pass --base-url (e.g. https://api.example.com/v1)", field="base_url"
        )
    report = draft_report(draft, project, dry_run, started)
    if absolute is None:  # a dry run only looks: say what saving will need instead of refusing
        report.notes.append(f"{NO_BASE_URL}: saving this import needs --base-url")
    if not dry_run:
        report.apply(await store_draft(rt, draft, project, replace, importer=importer))
    report.seconds = time.perf_counter() - started
    return report


async def import_catalog(
    rt: Runtime,
    source: str,
    *,
    slug: str,
    project: str = "default",
    dry_run: bool = False,
    replace: bool = False,
) -> ImportReport:
    started = time.perf_counter()
    validate_slug(slug)
    validate_slug(project)
    async with redaction.redacting(rt):
        raw = await read_source(rt, source)
        draft = await asyncio.to_thread(
            convert_catalog, raw, slug, source=source, max_bytes=rt.settings.import_max_bytes
        )
    refuse_empty(draft, "the catalogue has no tool definition")
    report = draft_report(draft, project, dry_run, started)
    if not dry_run:
        report.apply(await store_draft(rt, draft, project, replace))
    report.seconds = time.perf_counter() - started
    return report


def mcp_connection(
    *,
    url: str | None = None,
    command: str | None = None,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    transport: str = "auto",
    allow_hosts: Sequence[str] = (),
) -> dict[str, Any]:
    """The stored description of how to reach an MCP server (no secrets in it).

    ``allow_hosts``: for a stdio server, the hosts its sandbox may reach through the egress
    proxy (``egress/connect_proxy.py``; the guard's rules still apply); stored normalised."""
    if (url is None) == (command is None):
        raise ImportFailed("give either a server URL or a command to run", field="source")
    if url is not None:
        if allow_hosts:
            raise ImportFailed("allowed hosts are for a stdio server's sandbox", field="allow_hosts")
        if transport == "auto":
            transport = "sse" if url.rstrip("/").endswith("/sse") else "http"
        if transport not in ("http", "sse"):
            raise ImportFailed("a URL is reached with transport http or sse", field="transport")
        return {"transport": transport, "url": url}
    if transport not in ("auto", "stdio"):
        raise ImportFailed("a command is run with transport stdio", field="transport")
    connection: dict[str, Any] = {
        "transport": "stdio",
        "command": command,
        "args": list(args or []),
        "env": dict(env or {}),
    }
    if allow_hosts:
        connection["allow_hosts"] = [str(p) for p in parse_patterns(list(allow_hosts))]
    return connection


def _check_connection(rt: Runtime, key: str, connection: dict[str, Any]) -> None:
    if connection["transport"] == "stdio":
        spec = StdioSpec(
            command=connection["command"],
            args=tuple(connection["args"]),
            env=connection["env"],
            allow_hosts=tuple(connection.get("allow_hosts") or ()),
        )
        check_spec(key, spec, rt.stdio_policy)
    else:
        rt.egress.check_url(connection["url"], field="url")


async def import_mcp(
    rt: Runtime,
    connection: dict[str, Any],
    *,
    slug: str,
    project: str = "default",
    dry_run: bool = False,
    replace: bool = False,
    approve_new: bool = False,
    credential: Mapping[str, Any] | None = None,
    importer: Principal | None = None,
    expect: str | None = None,
) -> ImportReport:
    """Connect, list the server's tools, and store them with how to reach the server.

    The report's ``fingerprint`` names the tools listed (names, kinds, descriptions,
    schemas); ``expect``, a dry run's fingerprint, refuses to store anything but the tools
    that dry run showed (the server may have changed in between).

    ``approve_new``: store the tools ``pending`` (invisible to agents until approved, see
    ``gateway/sync.approve``) instead of ``active``. ``credential`` (an admin API body's
    ``auth``: scheme bearer, header or basic; env for stdio) is used to connect and sealed
    in the vault with the toolkit; it is never stored in the connection or reported.
    ``importer``: the API caller, who will own the toolkit (None: the operator's CLI).
    """
    started = time.perf_counter()
    validate_slug(slug)
    validate_slug(project)
    if not dry_run:
        await count_import(rt, importer)
    _check_connection(rt, f"{project}.{slug}", connection)
    cred = None
    if credential is not None:
        cred = parse_credential(rt, credential, kind=connection["transport"])
        cred_auth = to_auth(cred.scheme, cred.settings, cred.plain())
    timeout = rt.settings.upstream_timeout_s
    live = connection if cred is None else {**connection, "auth": cred_auth}
    # Whatever the server says (its errors, tool list, server info, instructions) is
    # redacted against every vault secret and the credential being imported, not yet sealed.
    extra = cred_auth.secrets() if cred is not None else ()
    async with (
        redaction.redacting(rt, extra) as red,
        rt.mcp.temporary(live, timeout_s=timeout, home=f"{project}.{slug}") as session,
    ):
        tools = red.value(await session.list_tools(timeout_s=timeout))
        info = red.value(session.server_info)
        instructions = red.text(session.instructions or "")
        era = red.text(session.protocol_version)
    source = connection.get("url") or " ".join([connection["command"], *connection["args"]])
    title = str(info.get("title") or info.get("name") or slug)
    draft = convert_tools_list(
        tools,
        slug,
        title=title,
        description=f"MCP server {title} {info.get('version', '')}".strip(),
        guide=instructions,
        source=source,
        meta={"server_info": info, "protocol_version": era},
    )
    draft.connection = connection
    listed = listing_fingerprint(draft)
    if expect is not None and expect != listed:
        raise ImportFailed(
            "the server's tools changed since the dry run; nothing was stored: run the dry run again",
            field="source",
        )
    report = draft_report(draft, project, dry_run, started)
    reach = ""
    if connection["transport"] == "stdio":
        hosts = connection.get("allow_hosts") or []
        reach = f"; sandbox network: {', '.join(hosts) + ' (through the egress guard)' if hosts else 'none'}"
    report.fingerprint = listed
    report.notes.append(f"negotiated MCP protocol {era} over {connection['transport']}{reach}")
    if approve_new:
        report.notes.append("tools are pending until approved (toolspoke approve)")
    if cred is not None:
        report.notes.append(f"credential ({cred.scheme}) {'checked' if dry_run else 'sealed in the vault'}")
    if not dry_run:
        report.apply(
            await store_draft(
                rt, draft, project, replace, approve_new=approve_new, credential=cred, importer=importer
            )
        )
        if cred is not None:
            await rt.mcp.discard(f"{project}.{slug}")  # a pooled session with the old credential
    report.seconds = time.perf_counter() - started
    return report


async def remove_toolkit(rt: Runtime, slug: str, *, project: str = "default") -> int:
    """Remove a toolkit and everything this process keeps for it; how many tools went.

    Nothing outlives its toolkit: its health state, its pooled session, its stdio child and
    that child's crash back-off, its cached OAuth token. (Another process, a ``serve`` while
    the CLI removes, keeps what it holds by id until its next probe round; ids are never
    reused, so no later toolkit can inherit it.)
    """
    async with rt.db.write() as tx:
        kit_id, ids = await store.delete_toolkit(tx, slug, project=project)
        await fts.unindex(tx, ids)
        await fts.optimize(tx)
    key = f"{project}.{slug}"
    rt.health.forget(kit_id)
    rt.tokens.drop(key)
    await rt.mcp.forget(key)  # stops its stdio child, if any, and drops its back-off
    return len(ids)


async def ensure_demo(rt: Runtime) -> None:
    """Install the ``demo`` toolkit (gateway/demo_api.py) if it is missing or stale, such as
    one pointing at a former ``serve``'s own address; one read when it is current. Someone's
    own toolkit named ``demo`` is left alone. Never fails the caller: it only logs."""
    if not rt.settings.demo:
        return
    async with rt.db.read() as conn:
        kits = await store.find_toolkits(conn, "demo", project="default")
    if kits and (kits[0].source != demo_api.SOURCE or kits[0].base_url == demo_api.BASE_URL):
        return
    try:
        data = orjson.dumps(demo_api.openapi_spec(demo_api.ORIGIN))
        await import_openapi(rt, demo_api.SOURCE, slug="demo", replace=True, data=data)
    except ApplianceError as exc:
        log.warning("could not install the demo toolkit: %s", exc.public_message)
