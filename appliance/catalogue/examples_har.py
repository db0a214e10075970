"""A HAR 1.2 file (``log.entries``) → Examples (pure).

Browsers' and proxies' recordings hold more than API calls: pages, scripts, images and
CORS preflights are reported as skipped (with the entry and why), never silently dropped.
A response body given in base64 is decoded for its field names, within the body bound.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from appliance.catalogue.examples_entry import (
    MAX_BODY,
    MAX_HEADERS,
    Example,
    check_body,
    check_count,
    response_text,
)
from appliance.errors import ImportFailed
from appliance.models import Skipped

_NOT_API = (
    "text/html",
    "text/css",
    "image/",
    "font/",
    "audio/",
    "video/",
    "application/javascript",
    "text/javascript",
)


def parse_har(text: str) -> tuple[list[Example], list[Skipped]]:
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ImportFailed(
            f"the HAR file is not JSON ({exc.msg}, at offset {exc.pos})", field="document"
        ) from None
    log = doc.get("log") if isinstance(doc, dict) else None
    entries = log.get("entries") if isinstance(log, dict) else None
    if not isinstance(entries, list):
        raise ImportFailed("not a HAR file: it has no log.entries list", field="document")
    check_count(len(entries))
    examples: list[Example] = []
    skipped: list[Skipped] = []
    for index, entry in enumerate(entries, start=1):
        where = f"entry {index}"
        found = _entry(entry, where)
        if isinstance(found, Skipped):
            skipped.append(found)
        else:
            examples.append(found)
    if not examples:
        raise ImportFailed(
            f"the HAR file has no API request ({len(skipped)} entries skipped)",
            field="document",
            data={"skipped": [{"where": s.where, "reason": s.reason} for s in skipped[:50]]},
        )
    return examples, skipped


def _fail(where: str, what: str) -> ImportFailed:
    return ImportFailed(f"{where}: {what}", field=where)


def _entry(entry: Any, where: str) -> Example | Skipped:
    if not isinstance(entry, dict) or not isinstance(entry.get("request"), dict):
        raise _fail(where, "an entry is an object with a 'request'")
    request = entry["request"]
    method, url = request.get("method"), request.get("url")
    if not isinstance(method, str) or not isinstance(url, str) or not url:
        raise _fail(where, "request.method and request.url must be strings")
    headers = _headers(request.get("headers"), where, "request")
    response: dict[str, Any] = entry["response"] if isinstance(entry.get("response"), dict) else {}
    status = response.get("status")
    status = status if isinstance(status, int) and 100 <= status <= 599 else None
    content: dict[str, Any] = response["content"] if isinstance(response.get("content"), dict) else {}
    mime = content.get("mimeType") if isinstance(content.get("mimeType"), str) else None
    label = f"{method} {url.split('?', 1)[0][:80]}"  # a query may hold a credential: not reported
    if method.upper() == "OPTIONS":
        return Skipped(f"{where} ({label})", "a CORS preflight, not an API call")
    if mime and mime.lower().startswith(_NOT_API):
        return Skipped(
            f"{where} ({label})", f"answered {mime.split(';')[0]}: a page or asset, not an API call"
        )
    body, form = _post_data(request.get("postData"), where)
    if body is not None and not any(k.lower() == "content-type" for k, _ in headers):
        post = request.get("postData")
        if isinstance(post, dict) and isinstance(post.get("mimeType"), str):
            headers = (*headers, ("Content-Type", post["mimeType"]))
    return Example(
        where,
        method,
        url,
        headers,
        check_body(body, where),
        form=form,
        status=status,
        response_type=mime,
        response_body=_response_body(content),
    )


def _headers(raw: Any, where: str, side: str) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _fail(where, f"{side}.headers must be a list")
    if len(raw) > MAX_HEADERS:
        raise _fail(where, f"more than {MAX_HEADERS} {side} headers")
    out = []
    for item in raw:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("value"), str)
        ):
            raise _fail(where, f"each of {side}.headers is {{name, value}} strings")
        if not item["name"].startswith(":"):  # HTTP/2 pseudo-headers: the URL says them
            out.append((item["name"], item["value"]))
    return tuple(out)


def _post_data(raw: Any, where: str) -> tuple[str | None, tuple[tuple[str, str], ...] | None]:
    if raw is None:
        return None, None
    if not isinstance(raw, dict):
        raise _fail(where, "request.postData must be an object")
    text = raw.get("text")
    if text is not None and not isinstance(text, str):
        raise _fail(where, "request.postData.text must be a string")
    params = raw.get("params")
    mime = str(raw.get("mimeType") or "").lower()
    if isinstance(params, list) and params and mime.startswith("multipart/"):
        fields = []
        for item in params[:MAX_HEADERS]:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise _fail(where, "each of request.postData.params has a name")
            if "fileName" in item:
                raise _fail(where, "a file upload part is not an example of a tool input")
            fields.append((item["name"], str(item.get("value", ""))))
        return None, tuple(fields)
    return text or None, None


def _response_body(content: dict[str, Any]) -> str | None:
    text = content.get("text")
    if not isinstance(text, str):
        return None
    if content.get("encoding") == "base64":
        if len(text) > MAX_BODY * 4 // 3 + 4:
            return None
        try:
            return base64.b64decode(text, validate=False).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
    return response_text(text)
