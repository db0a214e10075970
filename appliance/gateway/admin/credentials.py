"""A toolkit's credential as its managers handle it: shown as metadata, set, replaced, cleared.

Write-only, whatever the face: what comes back is the scheme, its non-secret settings (a
header name, a token URL), the key version and when it changed, never a value
(``gateway/credentials``). Who may is the one rule of management: the toolkit's owner or an
admin; anyone else gets the toolkit that does not exist. ``form_document`` turns the flat
fields of a form (the console's) into the document the admin API takes, so every face
validates the same way and refuses naming the same fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from appliance.errors import InvalidParams
from appliance.gateway import credentials
from appliance.gateway.admin.grants import managed_toolkit
from appliance.gateway.admin.imports import env_lines
from appliance.gateway.admin.projects import check_project
from appliance.models import Principal

if TYPE_CHECKING:
    from appliance.gateway.runtime import Runtime

# the fields each scheme reads from a form (all others are ignored, never stored)
FORM_FIELDS = {
    "bearer": ("token",),
    "header": ("name", "value"),
    "query": ("name", "value"),
    "cookie": ("name", "value"),
    "basic": ("username", "password"),
    "oauth2": ("token_url", "scope", "client_auth", "client_id", "client_secret", "refresh_token"),
    "env": ("env",),
}


async def show(rt: Runtime, actor: Principal, slug: str, project: str) -> dict[str, Any]:
    """The credential's metadata (``{"set": false}`` without one)."""
    await managed_toolkit(rt, actor, slug, check_project(project))
    return await credentials.show_credential(rt, slug, project=project)


async def schemes(rt: Runtime, actor: Principal, slug: str, project: str) -> list[str]:
    """The schemes this toolkit's credential may use (its upstream's kind decides)."""
    await managed_toolkit(rt, actor, slug, check_project(project))
    return list(await credentials.accepted_schemes(rt, slug, project=project))


async def put(
    rt: Runtime, actor: Principal, slug: str, project: str, doc: Mapping[str, Any]
) -> dict[str, Any]:
    """Set or replace the credential (validated, then sealed); its metadata."""
    await managed_toolkit(rt, actor, slug, check_project(project))
    return await credentials.set_credential(rt, slug, doc, project=project)


async def clear(rt: Runtime, actor: Principal, slug: str, project: str) -> bool:
    """Remove the credential; whether there was one."""
    await managed_toolkit(rt, actor, slug, check_project(project))
    return await credentials.clear_credential(rt, slug, project=project)


def form_document(fields: Mapping[str, str]) -> dict[str, Any]:
    """A form's flat fields as the credential document: the scheme's own fields, the empty
    ones left out (so a missing secret is refused naming it), ``env`` as NAME=value lines."""
    scheme = fields.get("scheme", "")
    if scheme not in FORM_FIELDS:
        raise InvalidParams(f"'scheme' must be one of {', '.join(FORM_FIELDS)}", field="scheme")
    doc: dict[str, Any] = {"scheme": scheme}
    for name in FORM_FIELDS[scheme]:
        value = fields.get(name, "")
        if not value:
            continue
        doc[name] = env_lines(value) if name == "env" else value
    return doc
