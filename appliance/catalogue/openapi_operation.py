"""One OpenAPI operation → a tool's input schema and HTTP binding (pure).

The binding is what the upstream room builds the request from, so it is explicit: the
effective ``style``/``explode`` of every parameter (OAS defaults and Swagger
``collectionFormat`` already applied), the wire name of every input, and the body's
media type. Inputs a credential fills (apiKey parameters, ``Authorization``, Slack-style
``token`` parameters) are not tool inputs; they are listed under ``credentials`` so the
vault knows where a secret goes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from appliance.catalogue.schema_translate import RefError, SchemaTranslator
from appliance.catalogue.schema_values import trim

LOCATIONS = ("path", "query", "header", "cookie")
BODY_DEPTHS = (4, 3, 2, 1, 0)  # tried in turn until the schema fits the budget
SCHEMA_BUDGET = 24_000  # approximate bytes of one tool's input schema
PARAM_DEPTH = 2
_FORBIDDEN_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}
_FORBIDDEN_PREFIXES = ("x-forwarded-",)
_FORBIDDEN_EXTRA = {"x-original-url", "x-rewrite-url"}
_TOKEN_NAMES = {"token", "access_token"}
_DEFAULT_STYLE = {"path": "simple", "query": "form", "header": "simple", "cookie": "form"}
_COLLECTION_STYLE = {
    "ssv": ("spaceDelimited", False),
    "tsv": ("tabDelimited", False),
    "pipes": ("pipeDelimited", False),
    "multi": ("form", True),
}
_ARG_INVALID = re.compile(r"[^A-Za-z0-9_.-]+")
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class SkipOperation(Exception):
    """The operation cannot become a tool; the message is the report's reason."""


@dataclass
class OperationContext:
    """What the document says that every operation needs."""

    translator: SchemaTranslator
    swagger: bool
    api_keys: dict[tuple[str, str], str]  # (location, wire name, lower-cased for headers) → scheme
    consumes: list[str]
    global_security: list[Any]
    notes: list[str] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)


@dataclass
class _Input:
    location: str  # path, query, header, cookie, body, form
    name: str  # wire name
    schema: Any
    required: bool
    style: str | None = None
    explode: bool | None = None
    description: str = ""


def build_operation(
    ctx: OperationContext, where: str, method: str, path: str, op: dict[str, Any], params: list[Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(input_schema, binding)`` for one operation, or SkipOperation."""
    security = op.get("security") if isinstance(op.get("security"), list) else ctx.global_security
    inputs, credentials = _parameters(ctx, where, params, op_has_security=bool(security))
    body_inputs, media_type, body_is_form = _body(ctx, where, op, params, credentials)
    ordered = _claim_order(inputs, body_inputs)
    args = _assign_args(ordered)
    depth_schema: tuple[dict[str, Any], int] | None = None
    for depth in BODY_DEPTHS:
        depth_schema = _input_schema(ctx, ordered, args, depth)
        if depth_schema[1] <= SCHEMA_BUDGET:
            break
    assert depth_schema is not None
    binding: dict[str, Any] = {
        "method": method.upper(),
        "path": path,
        "params": [
            {"arg": args[i], "name": x.name, "location": x.location, "style": x.style, "explode": x.explode}
            for i, x in enumerate(ordered)
            if x.location in LOCATIONS
        ],
        "body_arg": None,
        "body_media_type": media_type,
        "body_fields": [],
    }
    if body_is_form:
        fields = [(args[i], x.name) for i, x in enumerate(ordered) if x.location == "form"]
        binding["body_fields"] = [arg for arg, _ in fields]
        binding["body_field_names"] = {arg: name for arg, name in fields}
    else:
        binding["body_arg"] = next((args[i] for i, x in enumerate(ordered) if x.location == "body"), None)
    binding["security"] = security
    binding["credentials"] = credentials
    return depth_schema[0], binding


def _parameters(
    ctx: OperationContext, where: str, params: list[Any], *, op_has_security: bool
) -> tuple[list[_Input], list[dict[str, Any]]]:
    inputs: list[_Input] = []
    credentials: list[dict[str, Any]] = []
    for param in params:
        loc, name = param["in"], param["name"]
        if loc in ("body", "formData"):
            continue
        if loc not in LOCATIONS:
            if param.get("required") is True:
                raise SkipOperation(f"required parameter {name!r} has unsupported location {loc!r}")
            _count(ctx, f"parameters in unsupported locations ({loc})")
            continue
        scheme = _credential_scheme(ctx, loc, name, param, op_has_security)
        if scheme is not None:
            credentials.append({"name": name, "location": loc, "scheme": scheme or None})
            _count(ctx, "credential parameters (filled from the vault, not tool inputs)")
            continue
        if loc == "header" and _forbidden_header(name):
            _count(ctx, f"hop-by-hop/proxy header parameters ({name})")
            continue
        style, explode = _style(ctx, loc, param)
        required = loc == "path" or param.get("required") is True
        desc = "" if ctx.swagger else trim(param.get("description"))
        inputs.append(_Input(loc, name, _param_schema(ctx, param), required, style, explode, desc))
    return inputs, credentials


def _credential_scheme(
    ctx: OperationContext, loc: str, name: str, param: dict[str, Any], op_has_security: bool
) -> str | None:
    """The scheme that fills this parameter ("" if only recognised by name), or None."""
    key = (loc, name.lower() if loc == "header" else name)
    if key in ctx.api_keys:
        return ctx.api_keys[key]
    if loc == "header" and name.lower() == "authorization":
        return ""
    # Slack declares its OAuth token as a plain parameter on every method.
    desc = param.get("description")
    if (
        name.lower() in _TOKEN_NAMES
        and (op_has_security or ctx.api_keys)
        and (name.lower() == "access_token" or (isinstance(desc, str) and "auth" in desc.lower()))
    ):
        return ""
    return None


def _forbidden_header(name: str) -> bool:
    lower = name.lower()
    return lower in _FORBIDDEN_HEADERS or lower in _FORBIDDEN_EXTRA or lower.startswith(_FORBIDDEN_PREFIXES)


def _style(ctx: OperationContext, loc: str, param: dict[str, Any]) -> tuple[str, bool]:
    if ctx.swagger:
        if param.get("type") == "array":
            fmt = param.get("collectionFormat", "csv")
            if fmt in _COLLECTION_STYLE:
                return _COLLECTION_STYLE[fmt]
            return _DEFAULT_STYLE[loc], False  # csv, Swagger's default
        return _DEFAULT_STYLE[loc], loc in ("query", "cookie")
    style = param.get("style")
    if not isinstance(style, str):
        style = _DEFAULT_STYLE[loc]
    explode = param.get("explode")
    if not isinstance(explode, bool):
        explode = style == "form"
    return style, explode


def _param_schema(ctx: OperationContext, param: dict[str, Any]) -> Any:
    if ctx.swagger:
        return param  # a Swagger parameter *is* its schema (type, items, enum, …)
    schema = param.get("schema")
    if schema is None and isinstance(param.get("content"), dict):
        media = next(iter(param["content"].values()), None)
        schema = media.get("schema") if isinstance(media, dict) else None
    return schema if schema is not None else {}


def _body(
    ctx: OperationContext, where: str, op: dict[str, Any], params: list[Any], credentials: list[Any]
) -> tuple[list[_Input], str | None, bool]:
    """Body inputs, media type, and whether it is a flattened form."""
    if ctx.swagger:
        return _swagger_body(ctx, where, op, params, credentials)
    raw = op.get("requestBody")
    if raw is None:
        return [], None, False
    body = ctx.translator.resolve_object(raw)
    if not isinstance(body, dict) or not isinstance(body.get("content"), dict):
        raise SkipOperation("requestBody has no content map")
    required = body.get("required") is True
    media_type = pick_media_type(list(body["content"]))
    if media_type is None:
        offered = ", ".join(map(str, body["content"])) or "nothing"
        if required:
            raise SkipOperation(f"required request body is not JSON or a form (offers {offered})")
        ctx.notes.append(f"{where}: optional request body skipped (offers {offered})")
        return [], None, False
    media = body["content"][media_type]
    schema = media.get("schema", {}) if isinstance(media, dict) else {}
    wire_type = "application/json" if media_type.startswith("*/*") else media_type
    if _base(media_type) in FORM_TYPES:
        fields = _form_fields(ctx, schema)
        if fields is not None:
            return fields, wire_type, True
    desc = trim(body.get("description"))
    return [_Input("body", "body", schema, required, description=desc)], wire_type, False


def _swagger_body(
    ctx: OperationContext, where: str, op: dict[str, Any], params: list[Any], credentials: list[Any]
) -> tuple[list[_Input], str | None, bool]:
    own: Any = op.get("consumes")
    consumes: list[str] = [c for c in own if isinstance(c, str)] if isinstance(own, list) else ctx.consumes
    body = [p for p in params if p["in"] == "body"]
    form = [p for p in params if p["in"] == "formData"]
    if body:
        param = body[0]
        media_type = pick_media_type(consumes) if consumes else "application/json"
        if media_type is None or _base(media_type) in FORM_TYPES:
            if param.get("required") is True:
                raise SkipOperation(f"required body is not JSON (consumes {', '.join(map(str, consumes))})")
            ctx.notes.append(f"{where}: optional body skipped (consumes {', '.join(map(str, consumes))})")
            return [], None, False
        if media_type.startswith("*/*"):
            media_type = "application/json"
        schema = param.get("schema", {})
        desc = trim(param.get("description"))
        return (
            [_Input("body", "body", schema, param.get("required") is True, description=desc)],
            media_type,
            False,
        )
    if not form:
        return [], None, False
    multipart = "multipart/form-data" in consumes or any(p.get("type") == "file" for p in form)
    inputs = []
    for param in form:
        has_security = bool(ctx.global_security or op.get("security"))
        scheme = _credential_scheme(ctx, "query", param["name"], param, has_security)
        if scheme is not None:  # Slack also sends its token as a form field
            credentials.append({"name": param["name"], "location": "form", "scheme": scheme or None})
            _count(ctx, "credential parameters (filled from the vault, not tool inputs)")
            continue
        inputs.append(_Input("form", param["name"], param, param.get("required") is True))
    media = "multipart/form-data" if multipart else "application/x-www-form-urlencoded"
    return inputs, media, True


def _form_fields(ctx: OperationContext, schema: Any) -> list[_Input] | None:
    """Top-level properties of a form schema as inputs; None if it has none to flatten."""
    target = ctx.translator.resolve_object(schema)
    if not isinstance(target, dict) or not isinstance(target.get("properties"), dict):
        return None
    raw_required: Any = target.get("required")
    required: list[Any] = raw_required if isinstance(raw_required, list) else []
    return [
        _Input("form", str(name), prop, name in required)
        for name, prop in target["properties"].items()
        if not (isinstance(prop, dict) and prop.get("readOnly") is True)
    ]


def pick_media_type(offered: list[Any]) -> str | None:
    """JSON (exact, then ``+json``, then ``*/*``), then urlencoded form, then multipart."""
    types = [t for t in offered if isinstance(t, str)]
    bases = [_base(t) for t in types]
    for test in (
        lambda b: b == "application/json",
        lambda b: b.endswith("+json"),
        lambda b: b in ("*/*", "application/*"),
        lambda b: b == "application/x-www-form-urlencoded",
        lambda b: b == "multipart/form-data",
    ):
        for media, base in zip(types, bases, strict=True):
            if test(base):
                return media
    return None


def _base(media_type: str) -> str:
    return media_type.split(";", 1)[0].strip().lower()


def _claim_order(inputs: list[_Input], body: list[_Input]) -> list[_Input]:
    """Who keeps a contested name: path, query, body/form fields, header, cookie."""
    rank = {"path": 0, "query": 1, "body": 2, "form": 2, "header": 3, "cookie": 4}
    return sorted([*inputs, *body], key=lambda x: rank[x.location])


def _assign_args(ordered: list[_Input]) -> list[str]:
    return unique_args([(x.location, x.name) for x in ordered])


def unique_args(ordered: list[tuple[str, str]]) -> list[str]:
    """Unique property names for ``(location, wire name)`` in claim order: the first
    claimant keeps the (sanitised) wire name, later ones get ``<location>_<name>`` and, if
    still taken, ``_2``, ``_3``…"""
    used: set[str] = set()
    out: list[str] = []
    for location, name in ordered:
        arg = _ARG_INVALID.sub("_", name)[:64] or location
        if arg in used:
            arg = f"{location}_{arg}"[:64]
        base, n = arg, 2
        while arg in used:
            arg = f"{base[:60]}_{n}"
            n += 1
        used.add(arg)
        out.append(arg)
    return out


def _input_schema(
    ctx: OperationContext, ordered: list[_Input], args: list[str], depth: int
) -> tuple[dict[str, Any], int]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    defs: dict[str, Any] = {}
    size = 64
    for arg, x in zip(args, ordered, strict=True):
        d = depth if x.location in ("body", "form") else min(depth, PARAM_DEPTH)
        schema, sub_defs, sub_size = ctx.translator.translate(x.schema, d)
        if x.description and isinstance(schema, dict):
            schema = {**schema, "description": x.description}  # a copy: translations are shared
        properties[arg] = schema
        size += len(arg) + len(x.description) + 4
        defs.update(sub_defs)
        size += sub_size
        if x.required:
            required.append(arg)
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    out["additionalProperties"] = False
    if defs:
        out["$defs"] = defs
    return out, size


def _count(ctx: OperationContext, what: str) -> None:
    ctx.dropped[what] = ctx.dropped.get(what, 0) + 1


def check_parameter(ctx: OperationContext, raw: Any, index: int) -> dict[str, Any]:
    """A resolved parameter object with a string ``name`` and ``in``; else SkipOperation."""
    try:
        param = ctx.translator.resolve_object(raw)
    except RefError as exc:
        raise SkipOperation(f"parameter {index}: {exc}") from None
    if not isinstance(param, dict) or not isinstance(param.get("name"), str) or not param["name"]:
        raise SkipOperation(f"parameter {index} is not an object with a name")
    if not isinstance(param.get("in"), str):
        raise SkipOperation(f"parameter {param['name']!r} has no 'in'")
    return param


__all__ = ["SkipOperation", "build_operation", "check_parameter", "pick_media_type", "trim", "unique_args"]
