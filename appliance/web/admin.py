"""The admin API (``/api/v1``): toolkits and search for operators, owners and scripts.

Every route needs a user's key (never an agent's). Admins see and manage every toolkit; a
user imports toolkits they then own (at most ``imports_per_hour`` an hour), removes their
own, and lists and searches what they may see. Errors are JSON
``{"error": {reason, message, field, ...}}`` with the status the ApplianceError carries.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
from sanic import Blueprint, Request, response
from sanic.response import HTTPResponse

from appliance.errors import InvalidParams
from appliance.gateway import bridge, examples_import, imports, lore
from appliance.gateway.answers import describe
from appliance.gateway.searching import check_query, search_tools
from appliance.models import Principal
from appliance.web.admin_routes import (  # noqa: F401 - error_response, admin_only: shared with siblings
    admin_only,
    answers,
    body,
    error_response,
    managed,
    person_only,
    ssrf_unprocessable,
)

bp = Blueprint("admin", url_prefix="/api/v1")


bp.on_request(person_only)


def _viewer(request: Request) -> Principal:
    """Whose view a listing shows: an admin's is the whole appliance's."""
    principal: Principal = request.ctx.principal
    return replace(principal, operator=True) if principal.is_admin else principal


def _str(doc: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = doc.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"'{key}' must be a non-empty string", field=key)
    return value


@bp.get("/toolkits")
@answers()
async def toolkits(request: Request) -> Any:
    kits = await bridge.list_toolkits(
        request.app.ctx.rt, _viewer(request), project=request.args.get("project")
    )
    return {"toolkits": kits}


@bp.post("/toolkits/openapi")
@answers(refuse=ssrf_unprocessable)
async def import_openapi(request: Request) -> HTTPResponse:
    """Import an OpenAPI spec given by URL (``source``) or inline (``spec``).

    Body: ``{"slug", "source" | "spec", "project"?, "base_url"?, "dry_run"?, "replace"?}``.
    Local file paths are refused here: the API must not read the server's files.
    """
    doc = body(request)
    slug = _str(doc, "slug", required=True)
    assert slug is not None
    spec = doc.get("spec")
    source = _str(doc, "source", required=spec is None) or "request body"
    if spec is None and not source.startswith(("http://", "https://")):
        raise InvalidParams("'source' must be an http(s) URL; send a spec inline as 'spec'", field="source")
    data = None
    if spec is not None:
        if not isinstance(spec, dict):
            raise InvalidParams("'spec' must be an OpenAPI document object", field="spec")
        data = orjson.dumps(spec)
    report = await imports.import_openapi(
        request.app.ctx.rt,
        source,
        slug=slug,
        project=_str(doc, "project") or "default",
        base_url=_str(doc, "base_url"),
        dry_run=bool(doc.get("dry_run")),
        replace=bool(doc.get("replace")),
        data=data,
        importer=request.ctx.principal,
    )
    return response.json(report.as_dict(), status=200 if report.dry_run else 201)


def _flag(request: Request, name: str) -> bool:
    raw = (request.args.get(name) or "").lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise InvalidParams(f"'{name}' must be true or false", field=name)


@bp.post("/toolkits/lore")
@answers()
async def import_lore(request: Request) -> HTTPResponse:
    """Import (or update in place) a Lore toolkit from a .zip or .tar(.gz) sent as the body.

    Query: ``slug``, ``project``?, ``title``?, ``dry_run``?, ``skip_unreadable``?. The archive itself is
    the body (its first bytes tell zip from tar), so documents are never inflated into JSON.
    """
    slug = request.args.get("slug")
    if not slug:
        raise InvalidParams("query parameter 'slug' is required", field="slug")
    if (request.content_type or "").startswith("application/json"):
        raise InvalidParams(
            "send the archive itself as the body (application/zip or application/gzip), not JSON",
            field="body",
        )
    if not request.body:
        raise InvalidParams("the body must be a .zip or .tar(.gz) archive; it is empty", field="body")
    report = await lore.import_lore(
        request.app.ctx.rt,
        "upload",
        slug=slug,
        project=request.args.get("project") or "default",
        data=request.body,
        dry_run=_flag(request, "dry_run"),
        skip_unreadable=_flag(request, "skip_unreadable"),
        importer=request.ctx.principal,
        title=request.args.get("title"),
    )
    return response.json(report.as_dict(), status=200 if report.dry_run else 201)


@bp.post("/toolkits/infer")
@answers(refuse=ssrf_unprocessable)
async def infer_toolkit(request: Request) -> HTTPResponse:
    """Infer tools from examples (admins): ``{"slug", "examples": text | HAR object,
    "format"?, "project"?, "base_url"?, "dry_run"?, "replace"?}``; every tool is pending.
    Admins only: ``examples_import`` refuses anyone else before reading anything."""
    doc = body(request)
    slug = _str(doc, "slug", required=True)
    assert slug is not None
    examples = doc.get("examples")
    if isinstance(examples, dict):
        data = orjson.dumps(examples)
    elif isinstance(examples, str) and examples.strip():
        data = examples.encode()
    else:
        raise InvalidParams("'examples' must be the examples' text or a HAR object", field="examples")
    flags = {k: doc.get(k, False) for k in ("dry_run", "replace")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise InvalidParams(f"'{key}' must be true or false", field=key)
    report = await examples_import.import_examples(
        request.app.ctx.rt,
        "request body",
        slug=slug,
        project=_str(doc, "project") or "default",
        fmt=_str(doc, "format") or "auto",
        base_url=_str(doc, "base_url"),
        dry_run=flags["dry_run"],
        replace=flags["replace"],
        data=data,
        importer=request.ctx.principal,
    )
    return response.json(report.as_dict(), status=200 if report.dry_run else 201)


@bp.delete("/toolkits/<slug>")
@answers()
async def delete_toolkit(request: Request, slug: str) -> Any:
    project = request.args.get("project", "default")
    await managed(request, slug, project)  # theirs, or 404
    removed = await imports.remove_toolkit(request.app.ctx.rt, slug, project=project)
    return {"deleted": slug, "tools_removed": removed}


@bp.get("/search")
@answers()
async def search(request: Request) -> Any:
    query = request.args.get("q")
    if not query:
        raise InvalidParams("query parameter 'q' is required", field="q")
    check_query(query, "q")
    limit_raw = request.args.get("limit")
    try:
        limit = int(limit_raw) if limit_raw else None
    except ValueError:
        raise InvalidParams("'limit' must be an integer", field="limit") from None
    tools, ranking = await search_tools(
        request.app.ctx.rt,
        query,
        principal=_viewer(request),
        toolkit=request.args.get("toolkit"),
        project=request.args.get("project"),
        limit=limit,
    )
    return {"results": [describe(t) for t in tools], "ranking": ranking}
