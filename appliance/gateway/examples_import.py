"""Tools inferred from endpoint examples: read → parse → infer → seal the credential → store.

The examples (curl command lines, raw HTTP pairs or a HAR file) are parsed and inferred in
the catalogue (``catalogue/examples_*.py``, pure, off the event loop); this module decides.
Every inferred tool is stored ``pending``: invisible to search and uncallable until an
owner approves it by name (``gateway/sync.approve``). A credential the examples send is
sealed in the vault in the same transaction as the tools, and every value the examples
hold is redacted from whatever this import reports (tools, notes, errors) even before it
is sealed, so neither the report, the binding nor the audit trail can hold one in clear.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

from appliance.access import principals
from appliance.catalogue.examples_curl import parse_curl
from appliance.catalogue.examples_entry import FORMATS, Example, decode_text, detect_format
from appliance.catalogue.examples_har import parse_har
from appliance.catalogue.examples_http import parse_http
from appliance.catalogue.examples_infer import Inference, infer_toolkit
from appliance.catalogue.naming import validate_slug
from appliance.errors import ApplianceError, ImportFailed
from appliance.gateway import redaction
from appliance.gateway.credentials import CredentialInput, parse_credential
from appliance.gateway.imports import (
    NO_BASE_URL,
    ImportReport,
    count_import,
    draft_report,
    listing_fingerprint,
    read_source,
    refuse_empty,
    store_draft,
)
from appliance.gateway.naming_model import Named
from appliance.gateway.runtime import Runtime
from appliance.models import Principal, Skipped, ToolDraft, ToolkitDraft
from appliance.secret import Redactor

APPROVE_HINT = "approve each tool by name: toolspoke approve {slug} --tool NAME"


def _infer(raw: bytes, fmt: str, slug: str, source: str, base_url: str | None, max_bytes: int) -> Inference:
    if len(raw) > max_bytes:
        raise ImportFailed(f"the examples are {len(raw)} bytes; the limit is {max_bytes}", field="document")
    text = decode_text(raw)
    chosen = detect_format(text) if fmt == "auto" else fmt
    skipped: list[Skipped] = []
    examples: list[Example]
    if chosen == "har":
        examples, skipped = parse_har(text)
    elif chosen == "curl":
        examples = parse_curl(text)
    else:
        examples = parse_http(text)
    inference = infer_toolkit(examples, slug, source=source, base_url=base_url, skipped=skipped)
    inference.draft.meta["format"] = chosen
    return inference


def _credential(rt: Runtime, inference: Inference) -> CredentialInput | None:
    found = inference.credential
    if found is None:
        return None
    try:
        return parse_credential(rt, found.document(), kind="openapi")
    except ApplianceError as exc:  # its message names the part, never the value
        raise ImportFailed(
            f"the {found.scheme} credential the examples send ({found.name}, {found.entries[0]}) "
            f"cannot be kept: {exc.public_message}; nothing was stored",
            field=found.entries[0],
        ) from None


async def import_examples(
    rt: Runtime,
    source: str,
    *,
    slug: str,
    project: str = "default",
    fmt: str = "auto",
    base_url: str | None = None,
    dry_run: bool = False,
    replace: bool = False,
    data: bytes | None = None,
    importer: Principal | None = None,
    expect: str | None = None,
) -> ImportReport:
    """``source``: a local file or an http(s) URL (the CLI), or a label for ``data`` (the API).

    ``importer``: the caller, an admin, who will own the toolkit (None: the operator's CLI).
    The report's ``fingerprint`` names the tools inferred (names, descriptions, schemas: the
    naming model's too); ``expect``, a dry run's, refuses to store any other tools.
    """
    started = time.perf_counter()
    if importer is not None:  # inferred tools call whatever the examples name: an admin's call
        principals.require_admin(importer)
    validate_slug(slug)
    validate_slug(project)
    if fmt != "auto" and fmt not in FORMATS:
        raise ImportFailed(f"format must be auto or one of {', '.join(FORMATS)}", field="format")
    if base_url is not None:
        rt.egress.check_url(base_url, field="base_url")
    if not dry_run:
        await count_import(rt, importer)
    async with redaction.redacting(rt):  # a fetched file's error text
        raw = data if data is not None else await read_source(rt, source)
        limit = rt.settings.import_max_bytes
        inference = await asyncio.to_thread(_infer, raw, fmt, slug, source, base_url, limit)
    # The examples' own credential values are not in the vault yet: redact them too.
    async with redaction.redacting(rt, inference.secrets) as red:
        draft = inference.draft
        draft.tools = [_redacted(red, t) for t in draft.tools]
        refuse_empty(draft, "the examples show no request")
        named = await _named(rt, draft, inference, red)
        listed = listing_fingerprint(draft)
        if expect is not None and expect != listed:
            raise ImportFailed(
                "the inferred tools differ from the dry run's (the naming model answered otherwise);"
                " nothing was stored: run the dry run again",
                field="examples",
            )
        cred = _credential(rt, inference)
        base = draft.base_url
        if base is not None:
            rt.egress.check_url(base, field="base_url")
        elif not dry_run:
            raise ImportFailed(
                "the examples name no host; pass --base-url (e.g. https://api.example.com)",
                field="base_url",
            )
        report = draft_report(draft, project, dry_run, started)
        report.tools = [_tool_report(t, inference, dry_run, named) for t in draft.tools]
        report.fingerprint = listed
        report.notes = [red.text(n) for n in report.notes]
        if named is not None:
            report.notes += named.notes
        report.skipped = red.value(report.skipped)
        if base is None:
            report.notes.append(f"{NO_BASE_URL}: saving this import needs --base-url")
        if cred is not None:
            verb = "would be sealed" if dry_run else "sealed"
            report.notes.append(f"credential ({cred.scheme}) {verb} in the vault")
        report.notes.append(APPROVE_HINT.format(slug=slug))
        if not dry_run:
            stored = await store_draft(
                rt, draft, project, replace, approve_new=True, importer=importer, credential=cred
            )
            report.apply(stored)
    report.seconds = time.perf_counter() - started
    return report


async def _named(rt: Runtime, draft: ToolkitDraft, inference: Inference, red: Redactor) -> Named | None:
    """The configured chat model's names and descriptions on ``draft``'s tools (None: off).

    It is sent the tools' shapes only, redacted by ``red`` (the examples' credential values,
    every vault secret); whatever it answers, the import goes on (``gateway/naming_model.py``)."""
    if rt.naming_model is None:
        return None
    named = await rt.naming_model.name(draft.tools, slug=draft.slug, redactor=red)
    draft.tools = named.tools
    inference.sources = {named.renamed.get(k, k): v for k, v in inference.sources.items()}
    return named


def _redacted(red: Redactor, tool: ToolDraft) -> ToolDraft:
    return replace(
        tool,
        title=red.text(tool.title),
        description=red.text(tool.description),
        input_schema=red.value(tool.input_schema),
        binding=red.value(tool.binding),
    )


def _tool_report(tool: ToolDraft, inference: Inference, dry_run: bool, named: Named | None) -> dict[str, Any]:
    binding = tool.binding or {}
    origin = named.origins.get(tool.name, {}) if named is not None else {}
    out: dict[str, Any] = {
        "name": tool.name,
        "kind": tool.kind,
        "title": tool.title,
        "method": binding.get("method"),
        "path": binding.get("path"),
        "state": "pending",
        "parameters": _parameters(tool),
        "inferred_from": inference.sources.get(tool.name, []),
        "name_from": origin.get("name", "examples"),
        "description_from": origin.get("description", "examples"),
    }
    if dry_run:
        out["description"] = tool.description
        out["input_schema"] = tool.input_schema
    return out


def _parameters(tool: ToolDraft) -> list[dict[str, Any]]:
    """Each input with where it goes (path, query, header, body or form), its JSON type(s) and
    whether every example sent it."""
    binding = tool.binding or {}
    where = {p["arg"]: p["location"] for p in binding.get("params", [])}
    where.update({arg: "form" for arg in binding.get("body_fields", [])})
    if binding.get("body_arg"):
        where[binding["body_arg"]] = "body"
    required = set(tool.input_schema.get("required", []))
    out = []
    for arg, schema in (tool.input_schema.get("properties") or {}).items():
        kind = schema.get("type", "any") if isinstance(schema, dict) else "any"
        out.append(
            {
                "name": arg,
                "in": where.get(arg, "body"),
                "type": "|".join(kind) if isinstance(kind, list) else str(kind),
                "required": arg in required,
            }
        )
    return out
