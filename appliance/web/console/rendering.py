"""How the console's pages are made and sent: templates, static files, security headers.

Every string on a page may come from an upstream (a tool's name, description or title, a
health reason): the templates autoescape everything, undefined names fail loudly instead of
printing nothing, and no template is ever built from data (``{{7*7}}`` in a description is
text). The page's scripts and styles are files served here, so the Content-Security-Policy
forbids every inline script, style and handler; nothing is fetched from anywhere else.
"""

from __future__ import annotations

import hashlib
import mimetypes
from pathlib import Path
from typing import Any

import jinja2
from sanic import Request, response
from sanic.response import HTTPResponse

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
}
# Pages carry a session's CSRF token and what its user may see: never kept by a cache.
NO_STORE = {"Cache-Control": "no-store"}

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,  # every template, whatever its name
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _static_files() -> dict[str, tuple[bytes, str, str]]:
    """Every static file by name: its bytes, type and a strong ETag, read once at import."""
    files = {}
    for path in sorted(STATIC.iterdir()):
        if path.is_file() and path.suffix in (".js", ".css", ".svg"):
            data = path.read_bytes()
            kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            if kind.startswith("text/") or kind.endswith("javascript"):
                kind += "; charset=utf-8"
            files[path.name] = (data, kind, '"' + hashlib.sha256(data).hexdigest()[:32] + '"')
    return files


STATIC_FILES = _static_files()
# each asset's URL carries its hash, so a page never runs a stale script after an upgrade
ASSET_VERSIONS = {name: etag.strip('"')[:12] for name, (_, _, etag) in STATIC_FILES.items()}


def render(name: str, context: dict[str, Any], *, status: int = 200) -> HTTPResponse:
    body = _ENV.get_template(name).render(asset=ASSET_VERSIONS, **context)
    return response.html(body, status=status, headers=NO_STORE)


def static(request: Request, name: str) -> HTTPResponse:
    found = STATIC_FILES.get(name)
    if found is None:
        return render("error.html", error_context(404, "no such file"), status=404)
    data, kind, etag = found
    headers = {"ETag": etag, "Cache-Control": "public, max-age=31536000, immutable"}
    if request.headers.get("if-none-match") == etag:
        return response.empty(status=304, headers=headers)
    return response.raw(data, content_type=kind, headers=headers)


def error_context(status: int, message: str) -> dict[str, Any]:
    return {"status": status, "message": message, "viewer": None, "csrf": ""}


def secure(resp: HTTPResponse) -> None:
    """The console's headers on every answer it gives (pages, fragments, files, redirects)."""
    for name, value in SECURITY_HEADERS.items():
        resp.headers[name] = value
