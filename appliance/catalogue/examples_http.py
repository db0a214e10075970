"""Raw HTTP request/response pairs → Examples (pure).

The text is what a proxy log or an ``.http`` file shows: a request line (``GET /notes/1
HTTP/1.1``; the version may be left out), header lines, a blank line and the body; then,
optionally, the answer (``HTTP/1.1 200 OK``, headers, blank line, body). A line ``###``
separates pairs (the REST-client convention) but is not needed: the next request line
starts the next pair. One pass over the lines; errors name the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from appliance.catalogue.examples_entry import (
    MAX_HEADERS,
    Example,
    check_body,
    check_count,
    request_line,
    response_text,
)
from appliance.errors import ImportFailed

_STATUS_LINE = re.compile(r"HTTP/\d(?:\.\d)?\s+(\d{3})(?:\s.*)?")


@dataclass
class _Part:
    line: int
    start: tuple[str, str] | int  # (method, target) or a status
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    in_body: bool = False


def parse_http(text: str) -> list[Example]:
    examples: list[Example] = []
    request: _Part | None = None
    current: _Part | None = None

    def close() -> None:
        nonlocal request
        if request is not None:
            examples.append(_example(request, current if current is not request else None))
            check_count(len(examples))
        request = None

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r")
        if line.strip() == "###":
            close()
            current = None
            continue
        if current is None or current.in_body or not line.strip():
            started = request_line(line) if (current is None or current.in_body) else None
            status = _STATUS_LINE.fullmatch(line.strip()) if (current is None or current.in_body) else None
            if started is not None:
                close()
                request = current = _Part(number, started)
                continue
            if status is not None:
                if request is None or current is not request:
                    raise ImportFailed(
                        f"line {number}: an answer without its request", field=f"line {number}"
                    )
                current = _Part(number, int(status.group(1)))
                continue
        if current is None:
            if line.strip() and not line.lstrip().startswith("#"):
                raise ImportFailed(
                    f"line {number}: expected a request line such as 'GET /path HTTP/1.1'",
                    field=f"line {number}",
                )
            continue
        if current.in_body:
            current.body.append(line)
        elif not line.strip():
            current.in_body = True
        else:
            name, sep, value = line.partition(":")
            if not sep or not name.strip() or " " in name.strip():
                raise ImportFailed(f"line {number}: a header line is 'Name: value'", field=f"line {number}")
            if len(current.headers) >= MAX_HEADERS:
                raise ImportFailed(f"line {number}: more than {MAX_HEADERS} headers", field=f"line {number}")
            current.headers.append((name.strip(), value.strip()))
    close()
    if not examples:
        raise ImportFailed("no HTTP request found", field="document")
    return examples


def _text(part: _Part) -> str | None:
    text = "\n".join(part.body).strip("\n")
    return text or None


def _example(request: _Part, answer: _Part | None) -> Example:
    where = f"line {request.line}"
    assert isinstance(request.start, tuple)
    method, target = request.start
    host = next((v for k, v in request.headers if k.lower() == "host"), None)
    url = target
    if target.startswith("/") and host:
        url = f"http://{host}{target}"  # the scheme a raw request does not say; --base-url sets it
    headers = tuple((k, v) for k, v in request.headers if k.lower() != "host")
    status = response_type = response_body = None
    if answer is not None:
        assert isinstance(answer.start, int)
        status = answer.start
        response_type = next((v for k, v in answer.headers if k.lower() == "content-type"), None)
        response_body = response_text(_text(answer))
    return Example(
        where,
        method,
        url,
        headers,
        check_body(_text(request), where),
        status=status,
        response_type=response_type,
        response_body=response_body,
    )
