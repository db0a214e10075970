"""Re-sync, approval and reclassification of toolkits: list → plan → apply, in one transaction.

A re-sync lists the upstream's tools over the toolkit's pooled session (no second stdio
process, no extra handshake when one is open), plans with ``catalogue/sync`` and applies the
plan and its search-index changes in one write transaction: the index holds exactly the
active tools at every commit, so a pending or disabled tool is never found, described or
called (they all answer the same "unknown tool" as a name that never existed).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from appliance.catalogue import sync_store
from appliance.catalogue.changes import changes
from appliance.catalogue.mcp_listing import convert_tools_list
from appliance.catalogue.screening import visible
from appliance.catalogue.sync import StoredTool, plan_sync, screen_plan
from appliance.db import WriteTx
from appliance.errors import InvalidParams, NotFound, UpstreamError
from appliance.gateway import credentials, redaction, screening
from appliance.gateway.calls import pool_key
from appliance.gateway.runtime import Runtime
from appliance.models import KINDS, RUNNER_FOR_KIND, Kind
from appliance.search import fts

log = logging.getLogger(__name__)

AUTO = "auto"


@dataclass
class SyncReport:
    slug: str
    project: str
    added: list[str] = field(default_factory=list)  # new upstream: pending
    changed: list[str] = field(default_factory=list)  # definition changed: pending again
    removed: list[str] = field(default_factory=list)  # gone upstream: disabled
    returned: list[str] = field(default_factory=list)  # disabled, back upstream: pending
    unchanged: int = 0
    pending: list[str] = field(default_factory=list)  # every tool now awaiting approval
    flagged: list[dict[str, Any]] = field(default_factory=list)  # held for what screening found
    skipped: list[dict[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "slug": self.slug,
            "project": self.project,
            "added": self.added,
            "changed": self.changed,
            "removed": self.removed,
            "returned": self.returned,
            "unchanged": self.unchanged,
            "pending": self.pending,
            "flagged": self.flagged,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
        }


async def index_ids(tx: WriteTx, tool_ids: list[int]) -> None:
    """Put these stored tools in the search index (the caller knows they are active)."""
    rows = await sync_store.index_data(tx, tool_ids)
    await fts.index_tools(
        tx,
        [
            fts.IndexRow(
                tool_id=r["id"],
                name=r["name"],
                toolkit=r["toolkit"],
                group=r["grp"],
                upstream_name=r["upstream_name"],
                description=visible(r["description"]),
                input_schema=r["input_schema"],
            )
            for r in rows
        ],
    )


async def _list_upstream(rt: Runtime, key: str, connection: dict[str, Any]) -> list[dict[str, Any]]:
    timeout = rt.settings.upstream_timeout_s
    session = await rt.mcp.session(key, connection, timeout_s=timeout)
    try:
        return await session.list_tools(timeout_s=timeout)
    except UpstreamError as exc:
        # As for calls: a dead or garbled session is dropped so the next use opens a new one.
        if exc.reason in ("upstream_unavailable", "upstream_invalid"):
            await rt.mcp.discard(key)
        raise


async def resync_toolkit(rt: Runtime, slug: str, *, project: str = "default") -> SyncReport:
    """List the upstream's tools now and bring the catalogue in line (see ``catalogue/sync``)."""
    started = time.perf_counter()
    async with rt.db.read() as conn:
        kit = await sync_store.find_toolkit(conn, slug, project=project)
    if kit["source_kind"] != "mcp" or not kit["connection"]:
        raise InvalidParams(
            f"toolkit {slug!r} is not an MCP server; re-import its spec with --replace to update it",
            field="toolkit",
        )
    connection = await credentials.connection_with_auth(rt, kit["id"], kit["connection"])
    try:
        async with redaction.redacting(rt) as red:  # its errors and its listing may quote a secret
            listed = red.value(await _list_upstream(rt, pool_key(project, slug), connection))
    except UpstreamError as exc:
        # The operator's record of why a toolkit stopped updating (its text already redacted).
        log.warning("sync of %s/%s failed: %s", project, slug, exc.public_message)
        raise
    draft = convert_tools_list(listed, slug)
    report = SyncReport(slug=slug, project=project)
    report.skipped = [{"where": s.where, "reason": s.reason} for s in draft.skipped]
    texts = await screening.texts(rt, draft.tools)
    async with rt.db.write() as tx:
        # Read and plan inside the write transaction: an approval that committed while we
        # were listing is seen, and nothing can interleave between plan and apply.
        stored = await sync_store.stored_tools(tx, kit["id"])
        found = await screening.with_names(tx, slug, draft.tools, texts)
        plan = screen_plan(plan_sync(stored, draft.tools, slug), stored, draft.tools, found)
        await sync_store.apply_plan(tx, kit["id"], plan)
        leaving = plan.leaving_index
        if leaving:
            await fts.unindex(tx, leaving)
            await fts.optimize(tx)
        pending = await sync_store.stored_tools(tx, kit["id"], state="pending")
    report.added, report.changed = plan.added, plan.changed
    report.removed, report.returned = plan.removed, plan.returned
    report.unchanged = len(plan.unchanged)
    report.flagged = plan.flagged
    report.pending = [t.name for t in pending]
    report.seconds = time.perf_counter() - started
    rt.semantic.wake()  # changed descriptions get new vectors
    return report


async def list_pending(rt: Runtime, slug: str, project: str = "default") -> list[dict[str, Any]]:
    """Tools awaiting approval, with the full definition an approval would cover, why the
    screening holds it (``screening``: findings, [] when none) and, for a changed tool, what
    changed (``changes``: unified diffs of description, schema and annotations; None for a
    tool with nothing before it)."""
    async with rt.db.read() as conn:
        kit = await sync_store.find_toolkit(conn, slug, project=project)
        tools = await sync_store.stored_tools(conn, kit["id"], state="pending")
    out = []
    for t in tools:
        kind = t.kind_override or t.kind
        out.append(
            {
                "name": t.name,
                "upstream_name": t.upstream_name,
                "kind": kind,
                "kind_override": t.kind_override,
                "runner": RUNNER_FOR_KIND[kind],
                "description": t.description,
                "input_schema": t.input_schema,
                "annotations": t.annotations,
                "fingerprint": t.current_fingerprint,
                "screening": t.screening or [],
                "changes": changes(t.previous, t.description, t.input_schema, t.annotations),
            }
        )
    return out


async def approve(
    rt: Runtime,
    slug: str,
    *,
    project: str = "default",
    tools: list[str] | None = None,
    flagged: bool = False,
) -> dict[str, Any]:
    """Make pending tools active and searchable: ``tools`` by name (or upstream name), None = all.

    A tool the screening flagged is approved knowingly: by name, or with ``flagged`` when
    approving all; otherwise approving all leaves it pending (``held``, with its reasons).
    Approving an active tool is a no-op (idempotent); a disabled tool cannot be approved (it
    is gone upstream; a re-sync brings it back as pending if it returns). Returns the names
    that became active (``approved``), those of them the screening had flagged with the
    reasons the owner approved them over (``flagged``), and ``held``.
    """
    if tools is not None and (not tools or not all(isinstance(n, str) and n for n in tools)):
        raise InvalidParams("'tools' must be a non-empty list of tool names", field="tools")
    held = []
    async with rt.db.write() as tx:
        kit = await sync_store.find_toolkit(tx, slug, project=project)
        every = await sync_store.stored_tools(tx, kit["id"])
        if tools is None:
            if kit["inferred"]:  # a guess at an API, not its word: each tool is reviewed
                raise InvalidParams(
                    f"{slug}'s tools were inferred from examples: approve them one by one, by name",
                    field="tools",
                )
            chosen = [t for t in every if t.state == "pending" and (flagged or not t.screening)]
            held = [t for t in every if t.state == "pending" and t.screening and not flagged]
        else:
            by_name = {t.name: t for t in every} | {
                t.upstream_name: t for t in every if t.name != t.upstream_name
            }
            unknown = [n for n in tools if n not in by_name]
            if unknown:
                raise NotFound(f"toolkit {slug!r} has no tool named {unknown[0]!r}", field="tools")
            disabled = [n for n in tools if by_name[n].state == "disabled"]
            if disabled:
                raise InvalidParams(
                    f"{disabled[0]} is disabled (gone upstream) and cannot be approved", field="tools"
                )
            chosen = list(
                {by_name[n].id: by_name[n] for n in tools if by_name[n].state == "pending"}.values()
            )
        ids = [t.id for t in chosen]
        if ids:
            await sync_store.approve_tools(tx, ids)
            await index_ids(tx, ids)
            await fts.optimize(tx)
    rt.semantic.wake()
    return {
        "approved": sorted(t.name for t in chosen),
        "flagged": [
            {"name": t.name, "screening": t.screening} for t in sorted(chosen, key=_name) if t.screening
        ],
        "held": [{"name": t.name, "screening": t.screening} for t in sorted(held, key=_name)],
    }


def _name(tool: StoredTool) -> str:
    return tool.name


def parse_kind(kind: Any) -> Kind | None:
    """A kind for ``reclassify``: one of KINDS, or ``auto``/None (back to the source's kind)."""
    if kind is None or kind == AUTO:
        return None
    if kind not in KINDS:
        raise InvalidParams(f"kind must be one of {', '.join(KINDS)} or {AUTO}", field="kind")
    result: Kind = kind
    return result


async def reclassify(rt: Runtime, tool_name: str, kind: Any, *, project: str | None = None) -> dict[str, Any]:
    """Set (or with ``auto``/None clear) the owner's kind for a tool of any toolkit and state.

    The kind decides the runner the bridge demands, so this changes how agents must call
    the tool from the next call on. The index holds no kind: nothing to re-index.
    """
    override = parse_kind(kind)
    async with rt.db.write() as tx:
        found = await sync_store.tools_named_any_state(tx, tool_name, project=project)
        if not found:
            raise NotFound(f"no tool named {tool_name!r}", field="tool")
        if len(found) > 1:
            projects = [r["project"] for r in found]
            raise InvalidParams(
                f"tool {tool_name!r} is installed in several projects ({', '.join(projects)}); name one",
                field="project",
                data={"projects": projects},
            )
        row = found[0]
        await sync_store.set_kind_override(tx, int(row["id"]), override)
    effective = override or row["kind"]
    return {
        "name": row["name"],
        "project": row["project"],
        "toolkit": row["toolkit"],
        "state": row["state"],
        "kind": effective,
        "source_kind": row["kind"],
        "kind_override": override,
        "runner": RUNNER_FOR_KIND[effective],
    }
