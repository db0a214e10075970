"""The console's import page, ``/console/import``: OpenAPI by URL, upload or paste; MCP by
remote URL, local command or a pasted ``.mcp.json``; a Lore knowledge base from an uploaded
archive; tools inferred from endpoint examples (pasted curl lines or HTTP pairs, an uploaded
HAR); each a dry run first.

A dry run answers with the tools it would create (name, kind, runner, description) and the
operations skipped with why, and a "Save" form that names only the dry run's draft: what it
was given stays on the server (``gateway/admin/imports``), bound to this session, so "Save"
imports exactly what was shown and never a list of tools from the browser. A refusal
re-renders the form with the message naming the field (the spec, any environment value and
the examples are never echoed back: an environment or an example may hold a credential).
"""

from __future__ import annotations

from typing import Any

from sanic import Request
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError, InvalidParams
from appliance.gateway import imports as gateway_imports
from appliance.gateway.admin import imports
from appliance.web.console import guard
from appliance.web.console.rendering import render
from appliance.web.console.routes import _context, _see_other, bp, failure
from appliance.web.console.toolkit_forms import spec_from_form

# the form fields shown again after a refusal (never a spec, an environment or a .mcp.json)
_KEPT = (
    "slug",
    "project",
    "url",
    "base_url",
    "transport",
    "command",
    "args",
    "server",
    "approve",
    "title",
    "skip_unreadable",
    "format",
)
MODES = ("openapi", "remote", "local", "json", "lore", "examples")
FORMATS = ("auto", "curl", "http", "har")


def _form(request: Request, name: str) -> str:
    return str(request.form.get(name, "") if request.form else "")


def _page(request: Request, *, mode: str = "openapi", error: ApplianceError | None = None) -> HTTPResponse:
    kept = {name: _form(request, name) for name in _KEPT} if error is not None else {}
    context = _context(
        request,
        mode=mode,
        formats=FORMATS,
        kept=kept,
        error=error.public_message if error else "",
        error_field=(error.field or "") if error else "",
    )
    return render("import.html", context, status=guard.status_of(error) if error else 200)


@bp.get("/import")
async def import_page(request: Request) -> HTTPResponse:
    mode = request.args.get("mode", "openapi")
    return _page(request, mode=mode if mode in MODES else "openapi")


def _holder(request: Request) -> str:
    return imports.holder_of(guard.session_token(request))


def _connection(request: Request, mode: str) -> dict[str, Any]:
    """The MCP connection a form describes (its fields checked, refused naming them)."""
    if mode == "remote":
        url = _form(request, "url").strip()
        if not url.startswith(("http://", "https://")):
            raise InvalidParams("'url' must be the server's http(s) URL", field="url")
        transport = _form(request, "transport") or "auto"
        if transport not in ("auto", "http", "sse"):
            raise InvalidParams("'transport' must be auto, http or sse", field="transport")
        return gateway_imports.mcp_connection(url=url, transport=transport)
    if mode == "local":
        command = _form(request, "command").strip()
        if not command:
            raise InvalidParams("'command' is required: the program that runs the server", field="command")
        return gateway_imports.mcp_connection(
            command=command,
            args=imports.lines(_form(request, "args"), "args"),
            env=imports.env_lines(_form(request, "env")),
        )
    pasted = spec_from_form(request, file_field="mcp_json_file", text_field="mcp_json")
    if pasted is None:
        raise InvalidParams("'mcp_json' is required: paste the .mcp.json file", field="mcp_json")
    return imports.mcp_json_connection(pasted, _form(request, "server").strip() or None)


def _upload(request: Request, name: str) -> bytes | None:
    upload = request.files.get(name) if request.files else None
    return bytes(upload.body) if upload is not None and upload.body else None


async def _preview_more(request: Request, mode: str, slug: str, project: str) -> tuple[str, dict[str, Any]]:
    """A Lore archive's or endpoint examples' dry run (``gateway/admin/imports``)."""
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    if mode == "lore":
        return await imports.preview_lore(
            rt,
            viewer,
            _holder(request),
            slug=slug,
            project=project,
            data=_upload(request, "archive"),
            title=_form(request, "title"),
            skip_unreadable=_form(request, "skip_unreadable") == "on",
        )
    har = _upload(request, "har_file")
    pasted = _form(request, "examples")
    if har is not None and pasted.strip():
        raise InvalidParams("'examples': paste the examples or upload a HAR file, not both", field="examples")
    return await imports.preview_examples(
        rt,
        viewer,
        _holder(request),
        slug=slug,
        project=project,
        data=har if har is not None else (pasted.encode() if pasted.strip() else None),
        field_name="har_file" if har is not None else "examples",
        fmt=_form(request, "format") or "auto",
        base_url=_form(request, "base_url") or None,
    )


@bp.post("/import/<mode:openapi|remote|local|json|lore|examples>")
async def dry_run(request: Request, mode: str) -> HTTPResponse:
    """A dry run: nothing is stored; the preview page with its "Save" form."""
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    try:
        guard.check_csrf(request)
        slug, project = _form(request, "slug"), _form(request, "project")
        if mode in ("lore", "examples"):
            draft, report = await _preview_more(request, mode, slug, project)
        elif mode == "openapi":
            draft, report = await imports.preview_openapi(
                rt,
                viewer,
                _holder(request),
                slug=slug,
                project=project,
                url=_form(request, "url") or None,
                data=spec_from_form(request),
                base_url=_form(request, "base_url") or None,
            )
        else:
            draft, report = await imports.preview_mcp(
                rt,
                viewer,
                _holder(request),
                slug=slug,
                project=project,
                connection=_connection(request, mode),
                approve_new=_form(request, "approve") == "on",
            )
    except ApplianceError as exc:
        if exc.field == "csrf":
            return failure(request, exc)
        return _page(request, mode=mode, error=exc)
    skip = _form(request, "skip_unreadable") == "on"
    context = _context(request, draft=draft, report=report, mode=mode, skip_unreadable=skip)
    return render("import_preview.html", context)


@bp.post("/import/save")
async def save(request: Request) -> HTTPResponse:
    """Import what this session's dry run showed; then its toolkit's page."""
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    try:
        guard.check_csrf(request)
        report = await imports.save(rt, viewer, _holder(request), _form(request, "draft"))
    except ApplianceError as exc:
        return failure(request, exc)
    held = len(report.get("held") or [])
    more = ""
    pending = sum(1 for t in report["tools"] if t.get("state") == "pending")
    if pending:  # tools inferred from examples, each to approve by name
        more += f"&pending={pending}"
    if report.get("documents") is not None:
        more += f"&docs={report['documents']['count']}"
    return _see_other(
        f"/console/toolkits/{report['project']}/{report['slug']}"
        f"?done=imported&n={report['tool_count']}&held={held}{more}"
    )
