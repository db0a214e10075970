"""An OpenAPI 3.x / Swagger 2.0 document → a ToolkitDraft: one tool per operation (pure).

Broken pieces are skipped per operation and listed in ``skipped``; only a document that
is unusable as a whole (not a spec, ``paths`` not a mapping) raises ImportFailed. The
schema work lives in :mod:`schema_translate`, the per-operation work in
:mod:`openapi_operation`; this module walks the document and owns the document-level
facts: servers → ``base_url``, security schemes, guide text.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urljoin, urlsplit

from appliance.catalogue.naming import action_from_route, assign_names, validate_slug
from appliance.catalogue.openapi_operation import (
    OperationContext,
    SkipOperation,
    build_operation,
    check_parameter,
)
from appliance.catalogue.schema_translate import RefError, SchemaTranslator
from appliance.catalogue.schema_values import trim
from appliance.catalogue.spec_loader import spec_version
from appliance.errors import ImportFailed
from appliance.models import Kind, Skipped, ToolDraft, ToolkitDraft

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_KIND: dict[str, Kind] = {
    "get": "read",
    "head": "read",
    "options": "read",
    "trace": "read",
    "delete": "destructive",
}
TOOL_DESCRIPTION_LIMIT = 1000
GUIDE_LIMIT = 6000
_VARIABLE = re.compile(r"\{([^{}]*)\}")


def convert_openapi(
    spec: dict[str, Any], slug: str, *, source: str = "", base_url: str | None = None
) -> ToolkitDraft:
    """Convert a parsed spec (see ``spec_loader.parse_document``) into a toolkit draft."""
    validate_slug(slug)
    if not isinstance(spec, dict):
        raise ImportFailed("an OpenAPI document must be a mapping", field="document")
    version = spec_version(spec)
    try:
        return _Converter(spec, slug, version, source).run(base_url)
    except RecursionError:
        raise ImportFailed("the document nests too deeply to convert", field="document") from None


class _Converter:
    def __init__(self, spec: dict[str, Any], slug: str, version: str, source: str) -> None:
        self.spec = spec
        self.slug = slug
        self.version = version
        self.source = source
        self.swagger = version == "2.0"
        self.translator = SchemaTranslator(spec)
        self.skipped: list[Skipped] = []
        self.meta: dict[str, Any] = {"spec_version": version}

    def run(self, explicit_base: str | None) -> ToolkitDraft:
        raw_info: Any = self.spec.get("info")
        info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
        paths = self.spec.get("paths", {})
        if paths is None:
            paths = {}
        if not isinstance(paths, dict):
            raise ImportFailed("'paths' must be a mapping of path → path item", field="/paths")
        schemes = self._security_schemes()
        security = self.spec.get("security")
        consumes = self.spec.get("consumes")
        ctx = OperationContext(
            translator=self.translator,
            swagger=self.swagger,
            api_keys={
                (s["in"], s["name"].lower() if s["in"] == "header" else s["name"]): key
                for key, s in sorted(schemes.items())
                if s.get("type") == "apiKey"
                and isinstance(s.get("in"), str)
                and isinstance(s.get("name"), str)
            },
            consumes=[c for c in consumes if isinstance(c, str)] if isinstance(consumes, list) else [],
            global_security=security if isinstance(security, list) else [],
        )
        drafts: list[tuple[str, str, dict[str, Any]]] = []  # (raw action, key, fields)
        for path, item in paths.items():
            drafts.extend(self._path(ctx, str(path), item))
        names = assign_names(self.slug, [(raw, key) for raw, key, _ in drafts])
        tools = [ToolDraft(name=name, **fields) for name, (_, _, fields) in zip(names, drafts, strict=True)]
        self.meta["security_schemes"] = schemes
        self.meta["version"] = str(info.get("version", ""))
        self.meta["notes"] = ctx.notes + [f"dropped {n} {what}" for what, n in sorted(ctx.dropped.items())]
        return ToolkitDraft(
            slug=self.slug,
            source_kind="openapi",
            title=trim(info.get("title"), 200) or self.slug,
            description=_first_paragraph(info.get("description")),
            guide=self._guide(info),
            base_url=self._base_url(explicit_base),
            tools=tools,
            skipped=self.skipped,
            source=self.source,
            meta=self.meta,
        )

    def _path(self, ctx: OperationContext, path: str, item: Any) -> list[tuple[str, str, dict[str, Any]]]:
        try:
            item = self._path_item(item)
        except (RefError, SkipOperation) as exc:
            self.skipped.append(Skipped(where=path, reason=str(exc)))
            return []
        if not isinstance(item, dict):
            self.skipped.append(Skipped(where=path, reason="path item is not a mapping"))
            return []
        shared = item.get("parameters", [])
        path_servers = self._servers_url(item.get("servers"))
        out = []
        for method in METHODS:
            if method not in item:
                continue
            where = f"{method.upper()} {path}"
            op = item[method]
            try:
                if not isinstance(op, dict):
                    raise SkipOperation("operation is not a mapping")
                fields = self._operation(ctx, where, method, path, op, shared)
                override = self._servers_url(op.get("servers")) or path_servers
                if override:
                    fields["binding"]["base_url"] = override
            except (SkipOperation, RefError) as exc:
                self.skipped.append(Skipped(where=where, reason=str(exc)))
                continue
            op_id = op.get("operationId")
            raw = op_id if isinstance(op_id, str) and op_id.strip() else action_from_route(method, path)
            out.append((raw, where, fields))
        return out

    def _path_item(self, item: Any) -> Any:
        """A path item with a local ``$ref`` merged under its own keys (3.1 pathItems)."""
        if isinstance(item, dict) and "$ref" in item:
            target = self.translator.resolve_object({"$ref": item["$ref"]})
            if not isinstance(target, dict):
                raise SkipOperation("path item $ref does not point at a mapping")
            return {**target, **{k: v for k, v in item.items() if k != "$ref"}}
        return item

    def _operation(
        self, ctx: OperationContext, where: str, method: str, path: str, op: dict[str, Any], shared: Any
    ) -> dict[str, Any]:
        merged: dict[tuple[str, str], dict[str, Any]] = {}
        for group in (shared, op.get("parameters", [])):
            if group is None:
                continue
            if not isinstance(group, list):
                raise SkipOperation("'parameters' is not a list")
            for index, raw in enumerate(group):
                param = check_parameter(ctx, raw, index)
                name = param["name"].lower() if param["in"] == "header" else param["name"]
                merged[(param["in"], name)] = param  # the operation's own wins
        schema, binding = build_operation(ctx, where, method, path, op, list(merged.values()))
        op_id = op.get("operationId")
        summary = trim(op.get("summary"), 200)
        raw_detail: Any = op.get("description")
        detail: str = raw_detail if isinstance(raw_detail, str) else ""
        description = summary
        if detail.strip() and not detail.strip().startswith(summary):
            description = f"{summary}\n\n{detail.strip()}" if summary else detail.strip()
        elif detail.strip():
            description = detail.strip()
        tags = op.get("tags")
        return {
            "upstream_name": op_id if isinstance(op_id, str) and op_id.strip() else where,
            "group": str(tags[0]) if isinstance(tags, list) and tags and isinstance(tags[0], str) else "",
            "title": summary or (op_id if isinstance(op_id, str) else "") or where,
            "description": trim(description, TOOL_DESCRIPTION_LIMIT),
            "kind": _KIND.get(method, "write"),
            "input_schema": schema,
            "binding": binding,
        }

    def _security_schemes(self) -> dict[str, dict[str, Any]]:
        if self.swagger:
            raw = self.spec.get("securityDefinitions")
        else:
            components = self.spec.get("components")
            raw = components.get("securitySchemes") if isinstance(components, dict) else None
        out: dict[str, dict[str, Any]] = {}
        for name, value in raw.items() if isinstance(raw, dict) else ():
            try:
                scheme = self.translator.resolve_object(value)
            except RefError:
                continue
            if isinstance(scheme, dict) and isinstance(scheme.get("type"), str):
                kept = {
                    k: scheme[k] for k in ("type", "in", "name", "scheme") if isinstance(scheme.get(k), str)
                }
                if kept["type"] == "basic":  # Swagger 2.0 spelling of http basic
                    kept = {"type": "http", "scheme": "basic"}
                if kept["type"] == "oauth2":
                    flow = self._authorization_code(scheme)
                    if flow is not None:
                        kept["authorization_code"] = flow
                out[str(name)] = kept
        return out

    def _authorization_code(self, scheme: dict[str, Any]) -> dict[str, Any] | None:
        """An OAuth 2.0 authorization-code flow's endpoints and scope names (never a secret):
        OpenAPI 3 ``flows.authorizationCode``, Swagger 2 ``flow: accessCode``. The endpoints
        are the spec's, hence untrusted: the connect flow vets each through the egress guard."""
        if self.swagger:
            flow: Any = scheme if scheme.get("flow") == "accessCode" else None
        else:
            flows = scheme.get("flows")
            flow = flows.get("authorizationCode") if isinstance(flows, dict) else None
        if not isinstance(flow, dict):
            return None
        urls: dict[str, str] = {}
        for key, out in (
            ("authorizationUrl", "authorization_url"),
            ("tokenUrl", "token_url"),
            ("refreshUrl", "refresh_url"),
        ):
            value = flow.get(key)
            if isinstance(value, str) and value.strip() and len(value) <= 2048:
                urls[out] = self._absolute(value.strip()) or value.strip()
        if "authorization_url" not in urls or "token_url" not in urls:
            return None
        scopes = flow.get("scopes")
        names = [str(k)[:200] for k in scopes][:100] if isinstance(scopes, dict) else []
        return {**urls, "scopes": names}

    # -- base URL -----------------------------------------------------------------------

    def _base_url(self, explicit: str | None) -> str | None:
        if explicit:
            self.meta["base_url_status"] = "explicit"
            return explicit.rstrip("/")
        url = self._swagger_url() if self.swagger else self._servers_url(self.spec.get("servers"))
        if url is None:
            self.meta["base_url_status"] = "missing"
            return None
        self.meta["base_url_status"] = "absolute" if urlsplit(url).scheme else "relative"
        return url

    def _servers_url(self, servers: Any) -> str | None:
        """``servers[0].url`` with variables at their defaults, resolved against the source."""
        if not isinstance(servers, list) or not servers or not isinstance(servers[0], dict):
            return None
        url = servers[0].get("url")
        if not isinstance(url, str) or not url.strip():
            return None
        raw_vars: Any = servers[0].get("variables")
        variables: dict[str, Any] = raw_vars if isinstance(raw_vars, dict) else {}

        def substitute(match: re.Match[str]) -> str:
            var = variables.get(match.group(1))
            if isinstance(var, dict):
                if isinstance(var.get("default"), str | int):
                    return str(var["default"])
                if isinstance(var.get("enum"), list) and var["enum"]:
                    return str(var["enum"][0])
            return match.group(0)

        return self._absolute(_VARIABLE.sub(substitute, url.strip()))

    def _swagger_url(self) -> str | None:
        host = self.spec.get("host")
        base_path = self.spec.get("basePath")
        base_path = base_path if isinstance(base_path, str) else ""
        if not isinstance(host, str) or not host.strip():
            return self._absolute(base_path) if base_path else None
        schemes = [s for s in self.spec.get("schemes") or [] if isinstance(s, str)]
        if "https" in schemes or not schemes:
            scheme = "https" if schemes or not self.source.startswith("http://") else "http"
        else:
            scheme = schemes[0]
        return f"{scheme}://{host.strip()}{base_path}".rstrip("/")

    def _absolute(self, url: str) -> str | None:
        if urlsplit(url).scheme:
            return url.rstrip("/")
        if self.source.startswith(("http://", "https://")):
            return urljoin(self.source, url).rstrip("/")
        # Relative and nothing to resolve it against: the caller must supply --base-url.
        return url.rstrip("/") or None

    # -- text ---------------------------------------------------------------------------

    def _guide(self, info: dict[str, Any]) -> str:
        parts = []
        desc = trim(info.get("description"), GUIDE_LIMIT // 2)
        if desc:
            parts.append(desc)
        tags = self.spec.get("tags")
        lines = []
        for tag in tags if isinstance(tags, list) else []:
            if isinstance(tag, dict) and isinstance(tag.get("name"), str):
                about = trim(tag.get("description"), 200)
                lines.append(f"- {tag['name']}: {about}" if about else f"- {tag['name']}")
        if lines:
            parts.append("Groups:\n" + "\n".join(lines))
        return trim("\n\n".join(parts), GUIDE_LIMIT)


def _first_paragraph(text: Any) -> str:
    if not isinstance(text, str):
        return ""
    return trim(text.strip().split("\n\n", 1)[0], 300)
