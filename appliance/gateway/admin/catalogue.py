"""The catalogue as its managers work on it: a page of toolkit cards, one toolkit in full,
approving its pending tools, its allow-list a tool at a time, a re-sync, a tool's kind.

Who sees what is the one rule of management (``access/principals.manages``): an admin every
toolkit, a user the toolkits they own; a toolkit outside it answers like one that does not
exist, on a page, a fragment and an approval alike. Every filter a face hands in is checked
here and refused naming its field, so the console and any later face refuse alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appliance.access import principals
from appliance.catalogue import store, toolkit_pages
from appliance.db import SyncReader
from appliance.errors import ImportFailed, InvalidParams, NotFound
from appliance.gateway import imports, lore, sync
from appliance.gateway.admin.grants import managed_toolkit, set_toolkit_access, toolkit_access
from appliance.gateway.admin.projects import check_project
from appliance.gateway.screening import reveal
from appliance.models import RUNNER_FOR_KIND, Principal

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime

PER_PAGE = 24
PAGE_MAX = 100_000
TEXT_MAX = 200


def _choice(value: str | None, allowed: tuple[str, ...], field: str) -> str | None:
    if value is None or value == "":
        return None
    if value not in allowed:
        raise InvalidParams(f"'{field}' must be one of {', '.join(allowed)}", field=field)
    return value


def page_number(value: str | int | None) -> int:
    """A page's number from a query (empty: the first), refused naming the field ``page``."""
    if value is None or value == "":
        return 1
    if isinstance(value, str) and not (value.isascii() and value.isdigit() and len(value) <= 6):
        raise InvalidParams(f"'page' must be a whole number from 1 to {PAGE_MAX}", field="page")
    number = int(value)
    if not 1 <= number <= PAGE_MAX:
        raise InvalidParams(f"'page' must be a whole number from 1 to {PAGE_MAX}", field="page")
    return number


def search_text(value: str | None, *, field: str = "q") -> str:
    """Words a page is searched by (empty: no search), refused naming ``field``."""
    text = (value or "").strip()
    if len(text) > TEXT_MAX:
        raise InvalidParams(f"'{field}' must be at most {TEXT_MAX} characters", field=field)
    if not text.isprintable():
        raise InvalidParams(f"'{field}' must be printable text", field=field)
    return text


async def toolkit_cards(
    rt: Runtime,
    actor: Principal,
    *,
    project: str | None = None,
    type: str | None = None,
    health: str | None = None,
    q: str | None = None,
    page: str | int | None = None,
    per_page: int = PER_PAGE,
) -> dict[str, Any]:
    """One page of the cards of the toolkits ``actor`` manages, with what the filters need."""
    filters = toolkit_pages.Filters(
        owner_id=principals.managed_owner(actor),
        project=None if not project else check_project(project),
        type=_choice(type, toolkit_pages.TYPES, "type"),
        health=_choice(health, toolkit_pages.HEALTHS, "health"),
        text=search_text(q),
    )
    number = page_number(page)

    def gather(r: SyncReader) -> tuple[int, list[dict[str, Any]], list[str]]:
        total, cards = toolkit_pages.page_in(r, filters, offset=(number - 1) * per_page, limit=per_page)
        return total, cards, toolkit_pages.projects_in(r, filters.owner_id)

    total, cards, projects = await rt.db.reading(gather)
    return {
        "cards": cards,
        "total": total,
        "page": number,
        "pages": max(1, -(-total // per_page)),
        "projects": projects,
        "filters": {
            "project": filters.project or "",
            "type": filters.type or "",
            "health": filters.health or "",
            "q": filters.text,
        },
    }


async def toolkit_detail(rt: Runtime, actor: Principal, slug: str, project: str) -> dict[str, Any]:
    """One managed toolkit: its card, its health now, the streaks and transitions behind it,
    every tool (a pending one with its screening findings and the diffs of its change)."""
    kit_id = await managed_toolkit(rt, actor, slug, check_project(project))

    def gather(r: SyncReader) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[dict[str, Any]]]:
        card = toolkit_pages.card_in(r, slug, project)
        return card, toolkit_pages.tools_in(r, kit_id), store.health_history_in(r, kit_id)

    card, tools, history = await rt.db.reading(gather)
    if card is None or card["id"] != kit_id:  # removed (or replaced) between the two reads
        raise NotFound(f"no toolkit named {slug!r} in project {project!r}", field="toolkit")
    allowed = set((await toolkit_access(rt, actor, slug, project))["allowed_tools"])
    # A pending tool is reviewed with what the screening found and, for a changed one, the
    # diffs of its definition against the one it replaces (the CLI's and API's ``pending``).
    review = {}
    if card["pending"]:
        review = {t["name"]: t for t in await sync.list_pending(rt, slug, project)}
    for tool in tools:
        tool["runner"] = RUNNER_FOR_KIND[tool["kind"]]
        tool["allowed"] = tool["name"] in allowed
        pending = review.get(tool["name"]) if tool["state"] == "pending" else None
        tool["screening"] = (
            [{k: reveal(str(v)) for k, v in f.items()} for f in pending["screening"]] if pending else []
        )
        tool["changes"] = {k: v for k, v in (pending["changes"] or {}).items() if v} if pending else {}
    state = rt.health.get(kit_id)
    recent = None
    if state is not None:
        recent = {
            "fails": state.fails,
            "slows": state.slows,
            "oks": state.oks,
            "probing": rt.health.enforcing,
        }
    return {
        "toolkit": card,
        "tools": tools,
        "recent_health": recent,
        "health_history": history,
        "allowed_tools": sorted(allowed),
    }


async def approve_tools(
    rt: Runtime, actor: Principal, slug: str, project: str, tools: list[str] | None
) -> dict[str, Any]:
    """Approve pending tools of a toolkit ``actor`` manages (``tools`` None: every one the
    screening did not flag; a flagged one is approved by name). ``sync.approve``'s report."""
    await managed_toolkit(rt, actor, slug, check_project(project))
    return await sync.approve(rt, slug, project=project, tools=tools)


async def allow_tool(
    rt: Runtime, actor: Principal, slug: str, project: str, tool: str, allowed: bool
) -> list[str]:
    """Put one of the toolkit's tools on its allow-list or take it off; the list afterwards
    (empty: every active tool callable)."""
    kit_id = await managed_toolkit(rt, actor, slug, check_project(project))
    names = {t["name"] for t in await rt.db.reading(lambda r: toolkit_pages.tools_in(r, kit_id))}
    if tool not in names:
        raise NotFound(f"toolkit {slug!r} has no tool named {tool!r}", field="tool")
    current = set((await toolkit_access(rt, actor, slug, project))["allowed_tools"])
    wanted = current | {tool} if allowed else current - {tool}
    if wanted == current:
        return sorted(current)
    done = await set_toolkit_access(rt, actor, slug, project, allowed_tools=sorted(wanted))
    return list(done["allowed_tools"])


async def resync(rt: Runtime, actor: Principal, slug: str, project: str) -> dict[str, Any]:
    """List a managed MCP toolkit's upstream now and apply the plan; the report."""
    await managed_toolkit(rt, actor, slug, check_project(project))
    report = await sync.resync_toolkit(rt, slug, project=project)
    return report.as_dict()


async def reclassify(
    rt: Runtime, actor: Principal, slug: str, project: str, tool: str, kind: str
) -> dict[str, Any]:
    """Set (``auto``: clear) the kind of one of the toolkit's tools: admins only, since the
    kind decides the runner and so the approval prompt an agent's client shows."""
    principals.require_admin(actor)
    kit_id = await managed_toolkit(rt, actor, slug, check_project(project))
    names = {t["name"] for t in await rt.db.reading(lambda r: toolkit_pages.tools_in(r, kit_id))}
    if tool not in names:
        raise NotFound(f"toolkit {slug!r} has no tool named {tool!r}", field="tool")
    return await sync.reclassify(rt, tool, kind, project=project)


async def reimport(
    rt: Runtime,
    actor: Principal,
    slug: str,
    project: str,
    *,
    data: bytes | None = None,
    skip_unreadable: bool = False,
) -> dict[str, Any]:
    """Re-import a managed OpenAPI or Lore toolkit; the import report.

    OpenAPI: its spec fetched again from the URL it came from (``data`` None) or the one
    handed in, then a replace (tools matched by upstream name keep their approvals, kinds,
    grants and vectors); the report says what it changed (added, changed, removed, returned)
    and the operations skipped with why. A toolkit imported from a file on the server, or
    from a request body, has no URL to fetch again: its new spec must be handed in (no
    manager reads a server's file). Lore: the new archive (``data``) updates the documents
    in place (``lore.import_lore``, as the API's upload of the same slug): changed ones
    re-indexed, removed ones gone; its report's ``documents`` says which."""
    kit_id = await managed_toolkit(rt, actor, slug, check_project(project))
    found = await rt.db.reading(lambda r: store.find_toolkits_in(r, slug, project=project))
    kit = found[0] if found and found[0].id == kit_id else None
    if kit is not None and kit.source_kind == "lore":
        if not data:
            raise InvalidParams(
                "'archive' is needed: upload the knowledge base's new archive", field="archive"
            )
        try:
            updated = await lore.import_lore(
                rt,
                "console upload",
                slug=slug,
                project=project,
                data=data,
                skip_unreadable=skip_unreadable,
                importer=actor,
            )
        except ImportFailed as exc:
            exc.field = "archive" if exc.field == "source" else exc.field
            raise
        return updated.as_dict()
    if kit is None or kit.source_kind != "openapi":
        raise InvalidParams(
            f"toolkit {slug!r} is not an OpenAPI or Lore toolkit; an MCP toolkit is re-synced instead",
            field="toolkit",
        )
    card = await rt.db.reading(lambda r: toolkit_pages.card_in(r, slug, project))
    if card is not None and card["inferred"]:  # a spec would silently replace reviewed guesses
        raise InvalidParams(
            f"toolkit {slug!r} was inferred from examples: import its examples again (replace) "
            "rather than an OpenAPI spec",
            field="toolkit",
        )
    if data is None and not kit.source.startswith(("http://", "https://")):
        raise InvalidParams(
            "'spec' is needed: this toolkit's spec came from no URL; upload or paste the new one",
            field="spec",
        )
    report = await imports.import_openapi(
        rt,
        kit.source if data is None else "console upload",
        slug=slug,
        project=project,
        base_url=kit.base_url or None,
        replace=True,
        data=data,
        importer=actor,
    )
    return report.as_dict()
