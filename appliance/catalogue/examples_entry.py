"""One recorded request (and, when known, its answer), whatever format it came in (pure).

The three parsers (``examples_curl``, ``examples_http``, ``examples_har``) each turn their
format into ``Example`` rows; inference (``examples_infer``) reads only these. Every
parser works in one pass over its input under the bounds here, and every error names the
entry it is about, never a header value (an example's headers may hold a live credential).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

from appliance.errors import ImportFailed

Format = Literal["curl", "http", "har"]
FORMATS: tuple[Format, ...] = ("curl", "http", "har")
MAX_EXAMPLES = 5000  # a recording of a whole session is hundreds; more is not an API's examples
MAX_HEADERS = 100
MAX_URL = 8192
MAX_BODY = 256 * 1024  # one request body; a response body beyond it is not read for fields
_METHOD = re.compile(r"[A-Z]{1,16}")
_REQUEST_LINE = re.compile(r"(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS)\s+(\S+)(?:\s+HTTP/\d(?:\.\d)?)?\s*")


@dataclass(frozen=True)
class Example:
    where: str  # "entry 3" (HAR), "line 12" (curl, raw HTTP): what the report names
    method: str
    url: str  # absolute, or origin-form ("/notes/1?x=2") when the format gives no host
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may hold a credential
    body: str | None = field(default=None, repr=False)
    form: tuple[tuple[str, str], ...] | None = field(default=None, repr=False)  # multipart fields
    status: int | None = None
    response_type: str | None = None
    response_body: str | None = field(default=None, repr=False)

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        return next((v for k, v in self.headers if k.lower() == lowered), None)

    @property
    def media_type(self) -> str | None:
        """The request body's media type, lower-cased, without parameters."""
        value = self.header("content-type")
        return value.split(";", 1)[0].strip().lower() or None if value else None


@dataclass(frozen=True)
class Target:
    origin: str | None  # "https://api.example.com" (no path), None for origin-form
    path: str  # "/notes/1" as sent (percent-encoding kept)
    query: tuple[tuple[str, str], ...]


def split_target(example: Example) -> Target:
    url = example.url
    if len(url) > MAX_URL:
        raise ImportFailed(f"{example.where}: the URL is over {MAX_URL} characters", field=example.where)
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ImportFailed(f"{example.where}: the URL cannot be parsed", field=example.where) from None
    if parts.scheme and parts.scheme not in ("http", "https"):
        raise ImportFailed(f"{example.where}: only http and https URLs are examples", field=example.where)
    origin = f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None
    path = parts.path or "/"
    if not path.startswith("/"):
        raise ImportFailed(f"{example.where}: the request target is not a path", field=example.where)
    query = tuple(parse_qsl(parts.query, keep_blank_values=True))
    return Target(origin, path, query)


def check_method(method: str, where: str) -> str:
    upper = method.upper()
    if not _METHOD.fullmatch(upper):
        raise ImportFailed(f"{where}: {method[:20]!r} is not an HTTP method", field=where)
    return upper


def check_count(count: int) -> None:
    if count > MAX_EXAMPLES:
        raise ImportFailed(f"more than {MAX_EXAMPLES} examples; split the recording", field="document")


def check_body(body: str | None, where: str) -> str | None:
    if body is not None and len(body) > MAX_BODY:
        raise ImportFailed(
            f"{where}: the request body is {len(body)} characters, over {MAX_BODY}", field=where
        )
    return body


def response_text(text: str | None) -> str | None:
    """A response body kept for its field names only when it is small enough to read."""
    return text if text is not None and len(text) <= MAX_BODY else None


def detect_format(text: str) -> Format:
    """HAR is JSON; curl files start with ``curl``; raw HTTP with a request line."""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith(("{", "[")):
            return "har"
        if stripped == "curl" or stripped.startswith(("curl ", "curl\t")):
            return "curl"
        if _REQUEST_LINE.fullmatch(stripped):
            return "http"
        break
    raise ImportFailed(
        "cannot tell the examples' format: give curl command lines, raw HTTP requests or a HAR file",
        field="format",
    )


def request_line(line: str) -> tuple[str, str] | None:
    match = _REQUEST_LINE.fullmatch(line.strip())
    return (match.group(1), match.group(2)) if match else None


def decode_text(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFailed(
            f"the examples are not UTF-8 (bad byte at offset {exc.start})", field="document"
        ) from None
