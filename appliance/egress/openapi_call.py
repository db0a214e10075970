"""Call one OpenAPI operation: tool arguments + stored binding → HTTP request → CallResult.

The binding is ``dataclasses.asdict(HttpBinding)`` as the OpenAPI converter stores it. The
owner's configuration fixes scheme, host, port and base path; agent arguments only ever fill
path segments (percent-encoded as one segment, so ``/``, ``?``, ``#`` and ``..`` cannot move
the request), query values, header values, cookies and the body (SSRF-08).
"""

from __future__ import annotations

import functools
import http
import re
import secrets
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import orjson

from appliance.egress.auth import Authorizer, Placement
from appliance.egress.transport import Egress, HttpResponse
from appliance.errors import ArgumentsInvalid, UpstreamError
from appliance.models import CallResult

_TEMPLATE = re.compile(r"\{([^{}]+)\}")
# Headers an agent value must never set: they route the request or frame the body.
_FORBIDDEN_HEADERS = frozenset(
    {
        "host",
        "x-forwarded-host",
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-original-url",
        "x-rewrite-url",
        "forwarded",
        "content-length",
        "transfer-encoding",
        "connection",
        "te",
        "upgrade",
        "proxy-authorization",
    }
)
_TEXT_TYPES = (
    "application/xml",
    "application/javascript",
    "application/x-www-form-urlencoded",
    "application/yaml",
)
# Characters a literal part of a path template may keep as they are (RFC 3986 pchar + "/").
_PATH_SAFE = "/:@!$&'()*+,;=-._~"


async def call_operation(
    egress: Egress,
    *,
    base_url: str,
    binding: dict[str, Any],
    arguments: dict[str, Any],
    timeout_s: float,
    max_bytes: int,
    extra_headers: dict[str, str] | None = None,
    authorizer: Authorizer | None = None,
) -> CallResult:
    """Build the request, send it through ``egress`` and turn the answer into a CallResult.

    Raises ArgumentsInvalid for an argument that cannot be sent (naming it) and
    UpstreamError for transport failures or a missing base URL (reason no_upstream). An
    HTTP error status is not raised: it becomes ``is_error=True`` with the status in meta.
    ``authorizer`` places the toolkit's credential; the owner's credential always wins over
    an agent's header, query parameter or cookie of the same name. An OAuth credential is
    refreshed once, and the request sent once more, when the upstream answers 401.
    """
    base = _base(binding.get("base_url") or base_url)
    params = [p for p in binding.get("params") or () if isinstance(p, Mapping)]
    path = _expand_path(str(binding.get("path") or "/"), params, arguments)
    # raw_path without "?" also drops the base query; its items are re-added below.
    url = base.copy_with(raw_path=base.raw_path.split(b"?", 1)[0].rstrip(b"/") + path.encode("ascii"))

    query: list[tuple[str, str]] = [(k, v) for k, v in base.params.multi_items()]
    headers: dict[str, str] = {}
    cookies: dict[str, str] = {}
    for p in params:
        arg, name, location = str(p.get("arg")), str(p.get("name")), p.get("location")
        if location == "path" or arguments.get(arg) is None:
            continue
        value = arguments[arg]
        if location == "query":
            query.extend(_query_items(name, value, p.get("style"), p.get("explode")))
        elif location == "header":
            if name.lower() in _FORBIDDEN_HEADERS:
                raise ArgumentsInvalid(
                    f"header parameter {name!r} may not be set by a tool call", field=f"/{arg}"
                )
            headers[name] = _header_value(arg, value, p.get("explode"))
        elif location == "cookie":
            cookies[name] = _joined(value, p.get("explode"))
    content, content_type = _body(binding, arguments)
    method = str(binding.get("method") or "GET").upper()

    async def send(placement: Placement) -> HttpResponse:
        owner = {**(extra_headers or {}), **placement.headers}
        lowered = {k.lower() for k in owner}
        out_headers = {k: v for k, v in headers.items() if k.lower() not in lowered}
        out_headers.update(owner)
        if content_type:
            out_headers["Content-Type"] = content_type
        taken = {k for k, _ in placement.query}
        return await egress.send(
            method,
            url,
            params=[(k, v) for k, v in query if k not in taken] + placement.query,
            headers=out_headers,
            cookies={**cookies, **placement.cookies},
            content=content,
            timeout_s=timeout_s,
            max_bytes=max_bytes,
        )

    placement = await authorizer.placement(egress) if authorizer is not None else Placement()
    response = await send(placement)
    if response.status == 401 and authorizer is not None and authorizer.refreshable:
        again = await authorizer.after_401(egress, response.headers.get("www-authenticate"))
        if again is not None:
            response = await send(again)
    return to_call_result(response)


@functools.lru_cache(maxsize=256)  # a toolkit's base URL, parsed once (httpx.URL is immutable)
def _base(raw: str) -> httpx.URL:
    try:
        base = httpx.URL(raw)
    except (httpx.InvalidURL, TypeError) as exc:
        raise UpstreamError("the toolkit's base URL is not a valid URL", reason="no_upstream") from exc
    if not base.is_absolute_url:
        raise UpstreamError("the toolkit has no absolute base URL; set one for it", reason="no_upstream")
    return base


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return orjson.dumps(value).decode()


def _joined(value: Any, explode: bool | None = False) -> str:
    """OpenAPI ``simple`` style: arrays comma-joined, objects as k,v (or k=v when exploded)."""
    if isinstance(value, list | tuple):
        return ",".join(_scalar(v) for v in value)
    if isinstance(value, Mapping):
        pairs = [(str(k), _scalar(v)) for k, v in value.items()]
        return ",".join(f"{k}={v}" if explode else f"{k},{v}" for k, v in pairs)
    return _scalar(value)


def _expand_path(template: str, params: list[Mapping[str, Any]], arguments: Mapping[str, Any]) -> str:
    by_name = {str(p.get("name")): str(p.get("arg")) for p in params if p.get("location") == "path"}

    pieces = _TEMPLATE.split(template)  # literal, name, literal, name, ..., literal
    out: list[str] = []
    for i, piece in enumerate(pieces):
        if i % 2 == 0:
            out.append(quote(piece, safe=_PATH_SAFE + "%"))
            continue
        arg = by_name.get(piece, piece)
        if arguments.get(arg) is None:
            raise ArgumentsInvalid(f"missing required path argument {arg!r}", field=f"/{arg}")
        # safe="": "/", "?", "#" and "%" in a value are data, never structure.
        out.append(quote(_joined(arguments[arg]), safe=""))
    path = "".join(out)
    if not path.startswith("/"):
        path = "/" + path
    # A segment that is only dots would be removed by URL normalisation ("/a/.." → "/"), so
    # "." and ".." are written %2E: the server reads the same text, the path cannot climb.
    return "/".join(s.replace(".", "%2E") if s in (".", "..") else s for s in path.split("/"))


def _query_items(name: str, value: Any, style: str | None, explode: bool | None) -> list[tuple[str, str]]:
    if isinstance(value, list | tuple):
        if explode is False:
            sep = {"spaceDelimited": " ", "pipeDelimited": "|"}.get(style or "form", ",")
            return [(name, sep.join(_scalar(v) for v in value))]
        return [(name, _scalar(v)) for v in value]
    if isinstance(value, Mapping):
        if style == "deepObject":
            return [(f"{name}[{k}]", _scalar(v)) for k, v in value.items()]
        if explode is False:
            return [(name, ",".join(f"{k},{_scalar(v)}" for k, v in value.items()))]
        return [(str(k), _scalar(v)) for k, v in value.items()]
    return [(name, _scalar(value))]


def _header_value(arg: str, value: Any, explode: bool | None) -> str:
    text = _joined(value, explode)
    if any(c in text for c in "\r\n\0"):
        raise ArgumentsInvalid(f"header argument {arg!r} contains a line break or NUL", field=f"/{arg}")
    return text


def _body(binding: Mapping[str, Any], arguments: Mapping[str, Any]) -> tuple[bytes | None, str | None]:
    """The request body and its Content-Type, or (None, None) when there is none."""
    body_arg = binding.get("body_arg")
    fields = [str(f) for f in binding.get("body_fields") or ()]
    media = str(binding.get("body_media_type") or "application/json")
    if body_arg and arguments.get(body_arg) is not None:
        value: Any = arguments[body_arg]
    elif fields and any(f in arguments for f in fields):
        value = {f: arguments[f] for f in fields if f in arguments}
    else:
        return None, None
    kind = media.split(";", 1)[0].strip().lower()
    if kind == "application/x-www-form-urlencoded":
        return urlencode(_form_items(value)).encode(), media
    if kind == "multipart/form-data":
        return _multipart(value)
    if kind == "application/json" or kind.endswith("+json"):
        return orjson.dumps(value), media
    if isinstance(value, str):
        return value.encode(), media
    return orjson.dumps(value), media


def _form_items(value: Any) -> list[tuple[str, str]]:
    if not isinstance(value, Mapping):
        return [("value", _scalar(value))]
    items: list[tuple[str, str]] = []
    for k, v in value.items():
        if v is None:
            continue
        if isinstance(v, list | tuple):
            items.extend((str(k), _scalar(x)) for x in v)
        else:
            items.append((str(k), _scalar(v)))
    return items


def _multipart(value: Any) -> tuple[bytes, str]:
    """multipart/form-data by hand: plain fields (objects as JSON parts), no file names."""
    boundary = "toolspoke-" + secrets.token_hex(12)
    parts: list[bytes] = []
    fields = value.items() if isinstance(value, Mapping) else [("value", value)]
    for k, v in fields:
        if v is None:
            continue
        # WHATWG escaping for the quoted name; a CR/LF could otherwise forge part headers.
        name = str(k).replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n'
        if isinstance(v, Mapping | list | tuple):
            head += "Content-Type: application/json\r\n"
            data = orjson.dumps(v)
        else:
            data = _scalar(v).encode()
        parts.append(head.encode() + b"\r\n" + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def _media(content_type: str) -> tuple[str, str]:
    """(media type, charset) from a Content-Type header."""
    kind, _, rest = content_type.partition(";")
    charset = "utf-8"
    for param in rest.split(";"):
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset" and val.strip():
            charset = val.strip().strip('"')
    return kind.strip().lower(), charset


def _decode(body: bytes, charset: str) -> str:
    try:
        return body.decode(charset, errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


def to_call_result(response: HttpResponse) -> CallResult:
    """An HTTP answer as MCP content: JSON/text verbatim, binary described, errors flagged."""
    status = response.status
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    status_line = f"HTTP {status} {phrase}".rstrip()
    meta: dict[str, Any] = {"status": status}
    kind, charset = _media(response.content_type)
    structured: Any = None
    if not response.body:
        text = status_line if status < 400 else f"{status_line} (empty body)"
    elif kind == "application/json" or kind.endswith("+json"):
        text = _decode(response.body, charset)
        try:
            parsed = orjson.loads(response.body)
        except orjson.JSONDecodeError:
            parsed = None  # claimed JSON but is not: pass the text on as-is
        if isinstance(parsed, dict):
            structured = parsed
    elif kind.startswith("text/") or kind in _TEXT_TYPES or kind.endswith("+xml"):
        text = _decode(response.body, charset)
    else:
        text = _maybe_text(response.body, kind)
    if status >= 400:
        meta["reason"] = "upstream_http_error"
        if response.body:
            text = f"{status_line}: {text}"
        return CallResult(content=[{"type": "text", "text": text}], is_error=True, meta=meta)
    return CallResult(content=[{"type": "text", "text": text}], structured=structured, meta=meta)


def _maybe_text(body: bytes, kind: str) -> str:
    if not kind:
        try:
            return body.decode("utf-8")  # untyped but readable: show it
        except UnicodeDecodeError:
            kind = "application/octet-stream"
    return f"Binary response: {kind}, {len(body)} bytes (not shown)"
