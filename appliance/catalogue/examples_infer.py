"""Examples → a ToolkitDraft of HTTP tools, without any model (pure).

Requests are grouped by method and path template (``examples_paths``); each group becomes
one tool whose inputs are its path parameters, query parameters (types from the values,
required when every example sends them), the headers it sends that are neither standard
nor credentials, and its body (a JSON Schema inferred from every example, or flattened
form fields). Credentials are taken out (``examples_credentials``) for the vault. The
binding is the OpenAPI importer's, so ``egress/openapi_call.py`` calls these tools as it
calls any other. Shapes that cannot be one schema refuse the whole import, naming the
entries, so a half-true toolkit is never stored.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson

from appliance.catalogue import examples_credentials as creds
from appliance.catalogue.examples_entry import Example, Target, check_method, split_target
from appliance.catalogue.examples_paths import (
    PARAM,
    Route,
    Template,
    action,
    merge_varying,
    param_names,
    template_of,
)
from appliance.catalogue.examples_paths import segments as path_segments
from appliance.catalogue.examples_schema import Conflict, Shape, text_value
from appliance.catalogue.naming import assign_names, validate_slug
from appliance.catalogue.openapi_operation import unique_args
from appliance.errors import ImportFailed
from appliance.models import Kind, Skipped, ToolDraft, ToolkitDraft

DESCRIPTION_LIMIT = 1500
FIELDS_SHOWN = 12
ENTRIES_SHOWN = 20
CONFLICTS_REPORTED = 50
_KINDS: dict[str, Kind] = {"GET": "read", "HEAD": "read", "OPTIONS": "read", "DELETE": "destructive"}
# Headers a client sends for itself, or that route or frame the request: never tool inputs.
_STANDARD = {
    "accept", "accept-encoding", "accept-language", "accept-charset", "user-agent", "connection",
    "content-length", "content-type", "host", "origin", "referer", "cache-control", "pragma", "te",
    "upgrade", "dnt", "priority", "if-none-match", "if-modified-since", "x-requested-with",
    "forwarded", "keep-alive", "transfer-encoding", "expect", "proxy-authorization", "via",
    "x-real-ip", "x-original-url", "x-rewrite-url", "traceparent", "tracestate",
}  # fmt: skip
_STANDARD_PREFIXES = ("sec-", "x-forwarded-", "x-amzn-", "cf-")


@dataclass
class _Param:
    shape: Shape = field(default_factory=Shape)
    present: int = 0
    repeated: bool = False


@dataclass
class _Group:
    method: str
    template: Template
    examples: list[Example] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)

    def response_fields(self) -> frozenset[str] | None:
        """The answers' fields one level down too (``items[].id``, ``owner.email``): two
        collections behind the same envelope (``items``, ``total``) still differ."""
        keys: set[str] = set()
        for e in self.examples:
            keys |= _signature(_response_value(e))
        return frozenset(keys) or None


@dataclass
class Inference:
    draft: ToolkitDraft
    credential: creds.Chosen | None
    secrets: list[str] = field(repr=False)  # every credential value seen: to redact
    sources: dict[str, list[str]] = field(default_factory=dict)  # tool name → entries


def infer_toolkit(
    examples: list[Example],
    slug: str,
    *,
    source: str,
    base_url: str | None = None,
    skipped: list[Skipped] | None = None,
) -> Inference:
    """ImportFailed for conflicting shapes (every conflict in ``data``, nothing to store)."""
    validate_slug(slug)
    base_path = urlsplit(base_url).path.rstrip("/") if base_url else ""
    seen: list[creds.Seen] = []
    origins: Counter[str] = Counter()
    raw: dict[tuple[str, Template], _Group] = {}
    for e in examples:
        method = check_method(e.method, e.where)
        target = split_target(e)
        if target.origin is not None:
            if "@" in target.origin:
                raise ImportFailed(
                    f"{e.where}: the URL carries a user name or password; send it as an Authorization header",
                    field=e.where,
                )
            origins[target.origin] += 1
        path = target.path
        if base_path and (path == base_path or path.startswith(base_path + "/")):
            path = path[len(base_path) :] or "/"
        parts = path_segments(path)
        key = (method, template_of(parts))
        group = raw.setdefault(key, _Group(method, key[1]))
        group.examples.append(e)
        group.targets.append(Target(target.origin, path, target.query))
        seen += _credentials(e, target)
    groups = _merged(raw)
    chosen, notes = creds.choose(seen)
    tools: list[ToolDraft] = []
    conflicts: list[tuple[str, Conflict]] = []
    routes: list[tuple[Route, _Group]] = []
    for group in groups:
        names = tuple(param_names(group.template))
        routes.append((Route(group.method, group.template, names), group))
    tool_names = assign_names(slug, [(action(r.method, r.template), r.label) for r, _ in routes])
    sources: dict[str, list[str]] = {}
    for name, (route, group) in zip(tool_names, routes, strict=True):
        try:
            tools.append(_tool(name, route, group))
        except _Conflicts as exc:
            conflicts += [(route.label, c) for c in exc.found]
            continue
        sources[name] = [e.where for e in group.examples]
    if conflicts:
        _refuse(conflicts)
    origin = base_url or (origins.most_common(1)[0][0] if len(origins) == 1 else None)
    if base_url is None and len(origins) > 1:
        listed = ", ".join(sorted(origins)[:5])
        raise ImportFailed(
            f"the examples call {len(origins)} origins ({listed}); import each API's examples "
            "on its own, or pass --base-url",
            field="base_url",
        )
    if chosen is not None:
        notes.append(
            f"the {chosen.scheme} credential ({chosen.name}) sent by {len(chosen.entries)} example(s) "
            "becomes the toolkit's vault credential, never a tool input"
        )
    draft = ToolkitDraft(
        slug=slug,
        source_kind="openapi",
        title=slug,
        description=f"{len(tools)} HTTP tools inferred from {len(examples)} examples",
        guide="",
        base_url=origin,
        tools=tools,
        skipped=list(skipped or []),
        source=source,
        meta={"inferred": True, "examples": len(examples), "notes": notes},
    )
    return Inference(draft, chosen, creds.values(seen), sources)


class _Conflicts(Exception):
    def __init__(self, found: list[Conflict]) -> None:
        super().__init__(f"{len(found)} conflicts")
        self.found = found


def _refuse(conflicts: list[tuple[str, Conflict]]) -> None:
    label, first = conflicts[0]
    more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
    entries = sorted(set(first.kinds.values()))
    raise ImportFailed(
        f"examples with conflicting shapes: {label}: {first.message()}{more}; nothing was stored",
        field=entries[0] if entries else "document",
        data={
            "conflicts": [
                {"tool": lbl, "where": c.where, "kinds": c.kinds} for lbl, c in conflicts[:CONFLICTS_REPORTED]
            ],
            "conflict_count": len(conflicts),
        },
    )


def _credentials(e: Example, target: Target) -> list[creds.Seen]:
    found = [creds.from_header(k, v, e.where) for k, v in e.headers if creds.credential_header(k)]
    found += [creds.from_query(k, v, e.where) for k, v in target.query if creds.credential_query(k)]
    return [s for s in found if s is not None]


def _merged(raw: dict[tuple[str, Template], _Group]) -> list[_Group]:
    by_method: dict[str, dict[Template, _Group]] = {}
    for (method, template), group in raw.items():
        by_method.setdefault(method, {})[template] = group
    out: dict[tuple[str, Template], _Group] = {}
    for method, groups in by_method.items():
        folds = merge_varying({t: g.response_fields() for t, g in groups.items()})
        for template, group in groups.items():
            into = folds.get(template, template)
            target = out.setdefault((method, into), _Group(method, into))
            target.examples += group.examples
            target.targets += group.targets
    return sorted(out.values(), key=lambda g: (_route_order(g.template), g.method))


def _route_order(template: Template) -> tuple[str, ...]:
    return tuple("{}" if s is PARAM else s for s in template)


def _tool(name: str, route: Route, group: _Group) -> ToolDraft:
    found: list[Conflict] = []
    n = len(group.examples)
    path_shapes = [Shape() for _ in route.names]
    query: dict[str, _Param] = {}
    headers: dict[str, _Param] = {}
    body = Shape()
    media: dict[str, str] = {}  # body kind → first entry
    with_body = 0
    form: dict[str, _Param] = {}
    for e, target in zip(group.examples, group.targets, strict=True):
        values = [s for s, t in zip(path_segments(target.path), route.template, strict=True) if t is PARAM]
        for shape, value in zip(path_shapes, values, strict=True):
            shape.observe(text_value(value), e.where)
        counts = Counter(k for k, _ in target.query if not creds.credential_query(k))
        for k, v in target.query:
            if not creds.credential_query(k):
                p = query.setdefault(k, _Param())
                p.shape.observe(text_value(v), e.where)
                p.repeated = p.repeated or counts[k] > 1
        for k in counts:
            query[k].present += 1
        for k in {h for h, _ in e.headers if _header_input(h)}:
            headers.setdefault(k, _Param()).present += 1
        for k, v in e.headers:
            if _header_input(k):
                headers[k].shape.observe(v, e.where)
        kind, value = _body(e)
        if kind is None:
            continue
        with_body += 1
        media.setdefault(kind, e.where)
        if kind == "form":
            names = Counter(k for k, _ in value)
            for k, v in value:
                p = form.setdefault(k, _Param())
                p.shape.observe(text_value(v), e.where)
                p.repeated = p.repeated or names[k] > 1
            for k in names:
                form[k].present += 1
        else:
            body.observe(value, e.where)
    if len(media) > 1:
        found.append(Conflict("body", {_MEDIA_LABEL[k]: w for k, w in media.items()}))
    inputs: list[tuple[str, str, dict[str, Any], bool]] = []  # location, wire name, schema, required
    for pname, shape in zip(route.names, path_shapes, strict=True):
        inputs.append(("path", pname, shape.schema(f"path {pname}", lenient=True), True))
    for qname, p in query.items():
        inputs.append(("query", qname, _param_schema(p, f"query {qname}"), p.present == n))
    body_kind = next(iter(media), None)
    if body_kind == "form":
        for fname, p in form.items():
            inputs.append(("form", fname, _param_schema(p, f"form {fname}"), p.present == with_body == n))
    elif body_kind is not None:
        schema = body.schema("body", conflicts=found)
        inputs.append(("body", "body", schema, with_body == n))
    for hname, p in headers.items():
        inputs.append(("header", hname, {"type": "string"}, p.present == n))
    if found:
        raise _Conflicts(found)
    args = unique_args([(loc, wire) for loc, wire, _, _ in inputs])
    properties = {arg: schema for arg, (_, _, schema, _) in zip(args, inputs, strict=True)}
    required = [arg for arg, (_, _, _, req) in zip(args, inputs, strict=True) if req]
    input_schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        input_schema["required"] = required
    input_schema["additionalProperties"] = False
    binding: dict[str, Any] = {
        "method": route.method,
        "path": route.path,
        "params": [
            {
                "arg": arg,
                "name": wire,
                "location": loc,
                "style": "form" if loc == "query" else "simple",
                "explode": loc == "query",
            }
            for arg, (loc, wire, _, _) in zip(args, inputs, strict=True)
            if loc in ("path", "query", "header")
        ],
        "body_arg": next((a for a, i in zip(args, inputs, strict=True) if i[0] == "body"), None),
        "body_media_type": _media_type(group, body_kind),
        "body_fields": [a for a, i in zip(args, inputs, strict=True) if i[0] == "form"],
        "security": [],
        "credentials": [],
        "inferred_from": [e.where for e in group.examples][:ENTRIES_SHOWN],
    }
    if body_kind == "form":
        binding["body_field_names"] = {a: i[1] for a, i in zip(args, inputs, strict=True) if i[0] == "form"}
    return ToolDraft(
        name=name,
        upstream_name=route.label,
        group=next((s for s in route.template if s is not PARAM and s), "root") or "root",
        title=route.label,
        description=_description(route, group, body_kind),
        kind=_KINDS.get(route.method, "write"),
        input_schema=input_schema,
        binding=binding,
    )


_MEDIA_LABEL = {"json": "a JSON body", "form": "a form body", "text": "a text body"}


def _param_schema(p: _Param, where: str) -> dict[str, Any]:
    schema = p.shape.schema(where, lenient=True)
    return {"type": "array", "items": schema} if p.repeated else schema


def _header_input(name: str) -> bool:
    lowered = name.lower()
    return not (
        lowered in _STANDARD or lowered.startswith(_STANDARD_PREFIXES) or creds.credential_header(name)
    )


def _body(e: Example) -> tuple[str | None, Any]:
    if e.form is not None:
        return "form", list(e.form)
    if e.body is None or not e.body.strip():
        return None, None
    media = e.media_type or ""
    looks_json = e.body.lstrip()[:1] in ("{", "[")
    if media == "application/json" or media.endswith("+json") or (not media and looks_json):
        try:
            return "json", orjson.loads(e.body)
        except orjson.JSONDecodeError:
            raise ImportFailed(f"{e.where}: the request body is not valid JSON", field=e.where) from None
    if media == "application/x-www-form-urlencoded":
        return "form", parse_qsl(e.body, keep_blank_values=True)
    if media.startswith("multipart/"):
        raise ImportFailed(f"{e.where}: a raw multipart body cannot be read; give its fields", field=e.where)
    return "text", e.body


def _media_type(group: _Group, kind: str | None) -> str | None:
    if kind is None:
        return None
    if kind == "json":
        return "application/json"
    if kind == "form":
        multipart = any(e.form is not None for e in group.examples)
        return "multipart/form-data" if multipart else "application/x-www-form-urlencoded"
    return next((e.header("content-type") for e in group.examples if e.body), None) or "text/plain"


def _response_value(e: Example) -> Any:
    text = e.response_body
    if not text or not text.lstrip().startswith(("{", "[")):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, dict)), None)
    return value if isinstance(value, dict) else None


def _response_fields(e: Example) -> list[str]:
    value = _response_value(e)
    return [str(k) for k in value][: FIELDS_SHOWN * 4] if value is not None else []


def _signature(value: dict[str, Any] | None) -> set[str]:
    if value is None:
        return set()
    out = set()
    for key, item in value.items():
        out.add(str(key))
        if isinstance(item, list):
            item = next((v for v in item if isinstance(v, dict)), None)
            out |= {f"{key}[].{k}" for k in item} if item is not None else set()
        elif isinstance(item, dict):
            out |= {f"{key}.{k}" for k in item}
    return out


def _description(route: Route, group: _Group, body_kind: str | None) -> str:
    n = len(group.examples)
    wheres = [e.where for e in group.examples]
    shown = ", ".join(wheres[:ENTRIES_SHOWN]) + (
        f" and {n - ENTRIES_SHOWN} more" if n > ENTRIES_SHOWN else ""
    )
    parts = [f"{route.label}, inferred from {n} example{'s' if n != 1 else ''} ({shown})."]
    if body_kind is not None:
        parts.append(f"Sends {_MEDIA_LABEL[body_kind]}.")
    statuses = sorted({e.status for e in group.examples if e.status is not None})
    if statuses:
        parts.append("Answered " + ", ".join(map(str, statuses)) + ".")
    fields: dict[str, None] = {}
    for e in group.examples:
        fields.update(dict.fromkeys(_response_fields(e)))
    if fields:
        names = list(fields)
        more = f" and {len(names) - FIELDS_SHOWN} more" if len(names) > FIELDS_SHOWN else ""
        parts.append("Response fields: " + ", ".join(names[:FIELDS_SHOWN]) + more + ".")
    text = " ".join(parts)
    return text if len(text) <= DESCRIPTION_LIMIT else text[: DESCRIPTION_LIMIT - 1] + "…"
