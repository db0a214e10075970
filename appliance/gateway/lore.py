"""Lore imports: a folder or an archive of documents → a toolkit whose tools search and read them.

read (bounded: ``lore/archive.py``) → parse and chunk every file (pure, off the event loop:
``lore/formats.py``) → store the toolkit, its three tools and the documents in one
transaction (``imports.store_draft``: ownership, grants and the tool index as for any import).
All or nothing: a file that cannot be read refuses the import with the list of every such
file and why, unless the caller asked to skip them (they are listed in the report all the
same); a dry run stores nothing and says what an import would do. Importing again over the
same slug updates in place: changed documents are re-indexed, removed ones go, unchanged
ones are kept as they are (and so are the tools, their ids, grants and approvals).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path

from appliance.catalogue import store
from appliance.catalogue.naming import tool_name, validate_slug
from appliance.db import WriteTx
from appliance.errors import Conflict, ImportFailed, InvalidParams
from appliance.gateway import imports, lore_tools
from appliance.gateway.imports import ImportReport
from appliance.gateway.runtime import Runtime
from appliance.lore import archive, formats
from appliance.lore import store as lore_store
from appliance.models import Principal, ToolDraft, ToolkitDraft

GUIDE_FILE = "guide.md"  # at the knowledge base's root, any case: the toolkit's usage guide
_GUIDE_MAX = 20_000
REPORT_LIST_MAX = 200  # paths listed per kind in a report or a refusal
TITLE_MAX = 200


def _limits(rt: Runtime) -> archive.Limits:
    s = rt.settings
    return archive.Limits(
        max_files=s.lore_max_files, max_bytes=s.lore_max_bytes, max_file_bytes=s.import_max_bytes
    )


def _collect(source: str, data: bytes | None, limits: archive.Limits) -> archive.Collected:
    if data is not None:
        return archive.from_archive(data, limits)
    path = Path(source).expanduser()
    if path.is_dir():
        return archive.from_folder(path, limits)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ImportFailed(f"no such folder or archive: {source}", field="source") from None
    except PermissionError:
        raise ImportFailed(f"cannot read {source}: permission denied", field="source") from None
    if size > limits.max_bytes:
        raise ImportFailed(f"{source} is {size} bytes, over the limit of {limits.max_bytes}", field="source")
    try:
        return archive.from_archive(path.read_bytes(), limits)
    except PermissionError:
        raise ImportFailed(f"cannot read {source}: permission denied", field="source") from None


def _parse_all(
    collected: archive.Collected, chunk_chars: int, max_chars: int
) -> tuple[list[lore_store.Stored], list[tuple[str, str]]]:
    docs: list[lore_store.Stored] = []
    unreadable = list(collected.unreadable)
    for path, data in collected.files.items():
        try:
            doc = formats.parse(path, data, chunk_chars=chunk_chars, max_chars=max_chars)
        except formats.Unreadable as exc:
            unreadable.append((path, str(exc)))
            continue
        docs.append(lore_store.Stored(doc, hashlib.sha256(data).hexdigest(), len(data)))
    return docs, sorted(unreadable)


def tool_drafts(slug: str) -> list[ToolDraft]:
    return [
        ToolDraft(
            name=tool_name(slug, action),
            upstream_name=action,
            group="lore",
            title=title,
            description=description,
            kind=lore_tools.KIND,
            input_schema=schema,
            binding={"lore": action},
            annotations={"title": title, "readOnlyHint": True, "openWorldHint": False},
        )
        for action, title, description, schema in lore_tools.TOOLS
    ]


def _guide(slug: str, docs: list[lore_store.Stored]) -> str:
    lines = [
        f"A knowledge base of {len(docs)} documents. Find passages with {tool_name(slug, lore_tools.SEARCH)}"
        f" (a question or a few words); each names its document_id and offset: read around it with"
        f" {tool_name(slug, lore_tools.READ)}(id, offset, length). {tool_name(slug, lore_tools.LIST)}"
        " lists every document.",
    ]
    own = next((d for d in docs if d.document.path.lower() == GUIDE_FILE), None)
    if own is not None:
        lines += ["", own.document.body[:_GUIDE_MAX]]
    return "\n".join(lines)


def _title(title: str | None) -> str | None:
    """A toolkit title given by the caller: printable text, bounded; None or blank: none."""
    text = (title or "").strip()
    if len(text) > TITLE_MAX or not text.isprintable():
        raise InvalidParams(
            f"'title' must be printable text of at most {TITLE_MAX} characters", field="title"
        )
    return text or None


def _listed(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"where": path, "reason": why} for path, why in pairs[:REPORT_LIST_MAX]]


async def import_lore(
    rt: Runtime,
    source: str,
    *,
    slug: str,
    project: str = "default",
    data: bytes | None = None,
    dry_run: bool = False,
    skip_unreadable: bool = False,
    importer: Principal | None = None,
    title: str | None = None,
) -> ImportReport:
    """Import (or update in place) the Lore toolkit ``slug`` from a folder or an archive.

    ``source`` is a local path (the CLI) or, with ``data``, only the report's name for the
    uploaded archive (the admin API never reads the server's files). ``importer``: the API
    caller, who will own a new toolkit (None: the operator's CLI). ``title``: the toolkit's
    (None: the one it has, or ``Lore: <slug>`` for a new one).
    """
    started = time.perf_counter()
    validate_slug(slug)
    validate_slug(project)
    title = _title(title)
    if not dry_run:
        await imports.count_import(rt, importer)
    collected = await asyncio.to_thread(_collect, source, data, _limits(rt))
    s = rt.settings
    docs, unreadable = await asyncio.to_thread(_parse_all, collected, s.lore_chunk_chars, s.import_max_bytes)
    if unreadable and not (skip_unreadable or dry_run):
        raise ImportFailed(
            f"{len(unreadable)} file(s) cannot be read, first {unreadable[0][0]!r}: {unreadable[0][1]};"
            " nothing was stored (fix them, or skip them with skip_unreadable)",
            field="source",
            data={"unreadable": _listed(unreadable), "unreadable_count": len(unreadable)},
        )
    if not docs:
        raise ImportFailed(
            "nothing to import: no readable document (Markdown, text, HTML or PDF); nothing was stored",
            field="source",
            data={"unreadable": _listed(unreadable), "unreadable_count": len(unreadable)},
        )
    async with rt.db.read() as conn:
        kits = await store.find_toolkits(conn, slug, project=project)
        known = await lore_store.fingerprints(conn, kits[0].id) if kits else {}
    if kits and kits[0].source_kind != "lore":
        raise Conflict(
            f"toolkit {slug!r} in project {project!r} is a {kits[0].source_kind} toolkit, not a Lore one;"
            " choose another slug",
            field="slug",
        )
    draft = ToolkitDraft(
        slug=slug,
        source_kind="lore",
        title=title or (kits[0].title if kits else f"Lore: {slug}"),
        description=f"Knowledge base of {len(docs)} documents: search its passages, list and read them.",
        guide=_guide(slug, docs),
        base_url=None,
        tools=tool_drafts(slug),
        source=source,
        meta={"lore": {"documents": len(docs), "bytes": sum(d.size for d in docs)}},
    )
    report = imports.draft_report(draft, project, dry_run, started)
    report.skipped = _listed(unreadable)
    if collected.hidden:
        shown = ", ".join(collected.hidden[:20]) + (" …" if len(collected.hidden) > 20 else "")
        report.notes.append(f"{len(collected.hidden)} hidden file(s) set aside: {shown}")
    if unreadable and dry_run and not skip_unreadable:
        report.notes.append(f"{len(unreadable)} file(s) cannot be read: saving needs skip_unreadable")
    todo = lore_store.plan(known, docs)
    if not dry_run:

        async def write_documents(tx: WriteTx, kit_id: int) -> None:
            nonlocal todo
            todo = await lore_store.sync_documents(tx, kit_id, docs)
            await lore_store.optimize(tx)

        report.apply(
            await imports.store_draft(rt, draft, project, bool(kits), importer=importer, also=write_documents)
        )
    report.documents = {
        **{k: v[:REPORT_LIST_MAX] for k, v in todo.as_dict().items()},
        "count": len(docs),
        "chunks": sum(len(d.document.chunks) for d in docs),
        "files": [
            {
                "path": d.document.path,
                "title": d.document.title,
                "format": d.document.format,
                "chunks": len(d.document.chunks),
            }
            for d in sorted(docs, key=lambda d: d.document.path)[:REPORT_LIST_MAX]
        ],
    }
    report.seconds = time.perf_counter() - started
    return report
