"""curl command lines → Examples (pure).

A file holds one or more ``curl`` commands (continuation backslashes and ``#`` comments
allowed), split with ``shlex`` as a POSIX shell would. The options that shape a request
are read (``-X``, ``-H``, ``-d``/``--data``/``--data-raw``/``--data-binary``/
``--data-urlencode``, ``--json``, ``-F``, ``-u``, ``-b``, ``-A``, ``-e``, ``-G``, ``-I``,
``--url``); options that only change how curl runs are ignored; anything else is refused
by name, so a command is never half understood. Nothing here reads a file: ``-d @file``
is refused (the API must never read the server's files, the CLI's operator can paste it).
"""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass, field
from urllib.parse import quote_plus

from appliance.catalogue.examples_entry import Example, check_body, check_count
from appliance.errors import ImportFailed

_VALUED = {
    "-X": "request",
    "--request": "request",
    "-H": "header",
    "--header": "header",
    "-d": "data",
    "--data": "data",
    "--data-ascii": "data",
    "--data-binary": "data",
    "--data-raw": "raw",
    "--data-urlencode": "urlencode",
    "--json": "json",
    "-F": "form",
    "--form": "form",
    "--form-string": "form",
    "-u": "user",
    "--user": "user",
    "-b": "cookie",
    "--cookie": "cookie",
    "-A": "agent",
    "--user-agent": "agent",
    "-e": "referer",
    "--referer": "referer",
    "--url": "url",
}
_FLAGS = {"-G": "get", "--get": "get", "-I": "head", "--head": "head"}
_IGNORED_FLAGS = set("sSkLviNfg#") | {
    "--silent", "--show-error", "--insecure", "--location", "--verbose", "--include",
    "--compressed", "--fail", "--globoff", "--http1.1", "--http2", "--no-buffer",
    "--progress-bar", "--location-trusted", "--fail-with-body", "--no-progress-meter",
}  # fmt: skip
_IGNORED_VALUED = {
    "-o", "--output", "-m", "--max-time", "--connect-timeout", "-w", "--write-out", "--retry",
    "--cacert", "--capath", "--cert", "--key", "-x", "--proxy", "--resolve", "--limit-rate",
    "--max-redirs", "--retry-delay", "--retry-max-time", "--interface", "-c", "--cookie-jar",
}  # fmt: skip


@dataclass
class _Command:
    where: str
    method: str | None = None
    url: str | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    data: list[str] = field(default_factory=list)
    form: list[tuple[str, str]] = field(default_factory=list)
    json: bool = False
    get: bool = False
    head: bool = False


def parse_curl(text: str) -> list[Example]:
    """Every curl command of ``text``; ImportFailed names the line of the first problem."""
    examples: list[Example] = []
    for number, line in _logical_lines(text):
        where = f"line {number}"
        try:
            words = shlex.split(line, posix=True)
        except ValueError as exc:
            raise ImportFailed(f"{where}: cannot split the command ({exc})", field=where) from None
        if not words or words[0] != "curl":
            raise ImportFailed(f"{where}: not a curl command", field=where)
        examples.append(_example(_read(words[1:], where)))
        check_count(len(examples))
    if not examples:
        raise ImportFailed("no curl command found", field="document")
    return examples


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines joined over trailing backslashes, with the number of the first; comments dropped."""
    out: list[tuple[int, str]] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not parts:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = number
        if line.endswith("\\") and (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            parts.append(line[:-1])
            continue
        parts.append(line)
        out.append((start, " ".join(parts)))
        parts = []
    if parts:
        out.append((start, " ".join(parts)))
    return out


def _read(words: list[str], where: str) -> _Command:
    cmd = _Command(where)
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word == "-":
            _set_url(cmd, word)
            continue
        name, value = _split_option(word)
        if name in _FLAGS:
            setattr(cmd, _FLAGS[name], True)
        elif name in _IGNORED_FLAGS or (name.startswith("-") and name[1:] in _IGNORED_FLAGS):
            continue
        elif name in _VALUED or name in _IGNORED_VALUED:
            if value is None:
                if i >= len(words):
                    raise ImportFailed(f"{where}: {name} needs a value", field=where)
                value, i = words[i], i + 1
            if name in _VALUED:
                _apply(cmd, _VALUED[name], value)
        elif _short_flags(word):
            continue
        else:
            raise ImportFailed(f"{where}: unsupported curl option {name[:40]}", field=where)
    return cmd


def _split_option(word: str) -> tuple[str, str | None]:
    """``--data=x`` → (--data, x); ``-XPOST`` → (-X, POST); else (word, None)."""
    if word.startswith("--"):
        name, sep, value = word.partition("=")
        return (name, value) if sep else (word, None)
    if len(word) > 2 and word[:2] in _VALUED:
        return word[:2], word[2:]
    return word, None


def _short_flags(word: str) -> bool:
    """``-sSL``: a run of short flags that are all ignored."""
    return len(word) > 2 and not word.startswith("--") and all(c in _IGNORED_FLAGS for c in word[1:])


def _apply(cmd: _Command, what: str, value: str) -> None:
    where = cmd.where
    if what == "request":
        cmd.method = value
    elif what == "url":
        _set_url(cmd, value)
    elif what == "header":
        name, sep, content = value.partition(":")
        if not sep or not name.strip():
            raise ImportFailed(f"{where}: a header is 'Name: value'", field=where)
        cmd.headers.append((name.strip(), content.strip()))
    elif what in ("data", "json"):
        if value.startswith("@"):
            raise ImportFailed(f"{where}: the body is read from a file (@...); paste it inline", field=where)
        cmd.data.append(value)
        cmd.json = cmd.json or what == "json"
    elif what == "raw":
        cmd.data.append(value)
    elif what == "urlencode":
        cmd.data.append(_urlencoded(value, where))
    elif what == "form":
        key, sep, content = value.partition("=")
        if not sep or content.startswith(("@", "<")):
            raise ImportFailed(f"{where}: -F takes name=value (file parts are not examples)", field=where)
        cmd.form.append((key, content))
    elif what == "user":
        token = base64.b64encode(value.encode()).decode()
        cmd.headers.append(("Authorization", f"Basic {token}"))
    elif what == "cookie":
        if "=" not in value:
            raise ImportFailed(f"{where}: -b reads a cookie file; give name=value", field=where)
        cmd.headers.append(("Cookie", value))
    elif what == "agent":
        cmd.headers.append(("User-Agent", value))
    else:  # referer
        cmd.headers.append(("Referer", value))


def _urlencoded(value: str, where: str) -> str:
    name, sep, content = value.partition("=")
    if not sep:
        if value.startswith("@") or "@" in name:
            raise ImportFailed(f"{where}: --data-urlencode reads a file; paste it inline", field=where)
        return quote_plus(value)
    if name.endswith("@") or (not name and content.startswith("@")):
        raise ImportFailed(f"{where}: --data-urlencode reads a file; paste it inline", field=where)
    return f"{name}={quote_plus(content)}" if name else quote_plus(content)


def _set_url(cmd: _Command, url: str) -> None:
    if cmd.url is not None:
        raise ImportFailed(f"{cmd.where}: one URL per command", field=cmd.where)
    cmd.url = url if "://" in url else f"http://{url}"  # curl's default scheme


def _example(cmd: _Command) -> Example:
    where = cmd.where
    if cmd.url is None:
        raise ImportFailed(f"{where}: the command has no URL", field=where)
    headers = list(cmd.headers)
    has_type = any(k.lower() == "content-type" for k, _ in headers)
    url, body = cmd.url, None
    if cmd.form:
        if not has_type:
            headers.append(("Content-Type", "multipart/form-data"))
    elif cmd.data:
        joined = "&".join(cmd.data)
        if cmd.get:
            url = url + ("&" if "?" in url else "?") + joined
        else:
            body = joined
            if not has_type:
                media = "application/json" if cmd.json else "application/x-www-form-urlencoded"
                headers.append(("Content-Type", media))
    sends = body is not None or bool(cmd.form)
    method = cmd.method or ("HEAD" if cmd.head else "POST" if sends else "GET")
    form = tuple(cmd.form) if cmd.form else None
    return Example(where, method, url, tuple(headers), check_body(body, where), form=form)
