"""A toolkit page's forms beyond the first landing: its credential (set, replace, clear) and
the re-import of an OpenAPI toolkit (or a Lore one, from a new archive) with its report.

Like every console route: the CSRF token first, then one operation of ``gateway/admin``.
A credential is write-only: the form's secret fields are never echoed back (not in a page,
a refusal, or a redirect); what the page shows is the scheme and when it changed. A
re-import answers with its report page (what changed, what was skipped and why), rendered
from the operation's answer, every upstream string escaped.
"""

from __future__ import annotations

from sanic import Request
from sanic.response import HTTPResponse

from appliance.errors import ApplianceError, InvalidParams
from appliance.gateway.admin import catalogue
from appliance.gateway.admin import credentials as toolkit_credentials
from appliance.web.console import guard
from appliance.web.console.rendering import render
from appliance.web.console.routes import _DONE, _back, _context, bp, failure

_DONE.update({"credential": "credential", "uncredential": "uncredential"})
# every field a credential form may carry (the scheme's own are picked by the operation)
CREDENTIAL_FIELDS = sorted({f for fields in toolkit_credentials.FORM_FIELDS.values() for f in fields})


def _form(request: Request, name: str) -> str:
    return str(request.form.get(name, "") if request.form else "")


@bp.post("/toolkits/<project>/<slug>/credential")
async def set_credential(request: Request, project: str, slug: str) -> HTTPResponse:
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    try:
        guard.check_csrf(request)
        doc = toolkit_credentials.form_document(
            {"scheme": _form(request, "scheme"), **{f: _form(request, f) for f in CREDENTIAL_FIELDS}}
        )
        await toolkit_credentials.put(rt, viewer, slug, project, doc)
        return _back(request, "credential")
    except ApplianceError as exc:
        return failure(request, exc)


@bp.post("/toolkits/<project>/<slug>/uncredential")
async def clear_credential(request: Request, project: str, slug: str) -> HTTPResponse:
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    try:
        guard.check_csrf(request)
        await toolkit_credentials.clear(rt, viewer, slug, project)
        return _back(request, "uncredential")
    except ApplianceError as exc:
        return failure(request, exc)


def spec_from_form(
    request: Request, *, file_field: str = "spec_file", text_field: str = "spec_text"
) -> bytes | None:
    """The spec a form hands in: an uploaded file, else pasted text, else None (both empty).
    Both at once is refused naming the field: which one was meant is not ours to guess."""
    upload = request.files.get(file_field) if request.files else None
    pasted = _form(request, text_field)
    if upload is not None and upload.body:
        if pasted.strip():
            raise InvalidParams(
                f"'{text_field}': give the spec as a file or as text, not both", field=text_field
            )
        return bytes(upload.body)
    return pasted.encode() if pasted.strip() else None


@bp.post("/toolkits/<project>/<slug>/reimport")
async def reimport(request: Request, project: str, slug: str) -> HTTPResponse:
    rt, viewer = request.app.ctx.rt, request.ctx.viewer
    try:
        guard.check_csrf(request)
        upload = request.files.get("archive") if request.files else None
        if upload is not None and upload.body:  # a Lore toolkit's new archive
            report = await catalogue.reimport(
                rt,
                viewer,
                slug,
                project,
                data=bytes(upload.body),
                skip_unreadable=_form(request, "skip_unreadable") == "on",
            )
        else:
            report = await catalogue.reimport(rt, viewer, slug, project, data=spec_from_form(request))
    except ApplianceError as exc:
        return failure(request, exc)
    base = f"/console/toolkits/{project}/{slug}"
    return render("reimport.html", _context(request, report=report, base=base))
