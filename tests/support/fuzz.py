"""Hostile-input tooling shared by the protocol fuzz: raw HTTP, seeded mutations, the tally.

Everything here is deterministic for a given ``random.Random``: the same seed sends the same
bytes in the same order, so a failure the fuzz reports is reproduced by running it again.
Answers are judged by ``judge``; failures are collected per face and category (never raised
at the first one), so a run reports every problem it met.
"""

from __future__ import annotations

import json
import random
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import REPO

# Lines for the terminal summary (tests/conftest.py prints them whatever -s says).
SUMMARY = pytest.StashKey[list[str]]()
DEADLINE_S = 5.0  # the slowest answer the fuzz accepts
TRACEBACK_MARKERS = (b"Traceback", b'File "', b'.py", line', b"RecursionError", b"site-packages")
EVIL_ORIGIN = "https://evil.example"
EVIL_HOST = "evil.example"


def internal_paths(*extra: Path) -> tuple[bytes, ...]:
    """Paths whose appearance in an answer means internals leaked (the repo, the venv, data)."""
    paths = {str(REPO), sys.prefix, *(str(p) for p in extra)}
    return tuple(p.encode() for p in sorted(paths) if len(p) > 4)


@dataclass
class Tally:
    """One face's count of messages and its failures by category (each with a few examples)."""

    face: str
    sent: int = 0
    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0  # set when the face is done
    failures: dict[str, list[str]] = field(default_factory=dict)

    def done(self) -> Tally:
        self.seconds = time.monotonic() - self.started
        return self

    def fail(self, category: str, detail: str) -> None:
        self.failures.setdefault(category, []).append(detail[:600])

    def count(self, category: str) -> int:
        return len(self.failures.get(category, []))

    def line(self, categories: tuple[str, ...]) -> str:
        counts = ", ".join(f"{c} {self.count(c)}" for c in categories)
        extra = sorted(set(self.failures) - set(categories))
        more = "".join(f", {c} {self.count(c)}" for c in extra)
        took = self.seconds or time.monotonic() - self.started
        return f"{self.face:<14} sent {self.sent:>5} in {took:4.1f}s: {counts}{more}"


@dataclass
class Answer:
    status: int | None  # None: the connection closed (or timed out) before a status line
    head: bytes
    body: bytes
    elapsed: float
    timed_out: bool = False
    error: str = ""

    @property
    def raw(self) -> bytes:
        return self.head + self.body

    def header(self, name: str) -> str | None:
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name.lower().encode():
                return value.strip().decode("latin-1")
        return None

    def json(self) -> Any:
        body = self.body
        if (self.header("transfer-encoding") or "").lower() == "chunked":
            body = dechunk(body)
        return json.loads(body)


def dechunk(data: bytes) -> bytes:
    out, rest = b"", data
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out, rest = out + rest[:size], rest[size + 2 :]
    return out


def judge(tally: Tally, answer: Answer, what: str, paths: tuple[bytes, ...]) -> None:
    """The checks every answer passes: no 5xx, no traceback or internal path, in time."""
    tally.sent += 1
    if answer.timed_out or answer.elapsed > DEADLINE_S:
        tally.fail("slow", f"{what}: {answer.elapsed:.1f}s {answer.error}")
    if answer.status is not None and answer.status >= 500:
        tally.fail("5xx", f"{what}: {answer.status} {answer.body[:200]!r}")
    scan(tally, answer.raw, what, paths)
    internal(tally, answer.body, what)


def internal(tally: Tally, data: bytes, what: str) -> None:
    """An internal error (-32603, or the API's ``internal``) answering hostile input: an
    exception nobody turned into the error that names the bad field."""
    if any(m in data for m in (b'"code":-32603', b'"code": -32603', b'"reason":"internal"')):
        tally.fail("internal_error", f"{what}: {data[:300]!r}")


def scan(tally: Tally, data: bytes, what: str, paths: tuple[bytes, ...]) -> None:
    for marker in TRACEBACK_MARKERS:
        if marker in data:
            tally.fail("traceback", f"{what}: {marker!r} in {snippet(data, marker)!r}")
            break
    for path in paths:
        if path in data:
            tally.fail("internal_path", f"{what}: {path!r} in {snippet(data, path)!r}")
            break


def snippet(data: bytes, needle: bytes) -> bytes:
    at = data.find(needle)
    return data[max(0, at - 80) : at + 120]


# -- raw HTTP ----------------------------------------------------------------------------------


def request_bytes(
    method: str,
    path: str,
    headers: list[tuple[str, str]],
    body: bytes = b"",
    *,
    length: int | None = None,
) -> bytes:
    """An HTTP/1.1 request exactly as given: duplicate headers kept, ``length`` overriding the
    Content-Length (a lie makes a truncated body), ``length=-1`` sending none."""
    lines = [f"{method} {path} HTTP/1.1"]
    lines += [f"{k}: {v}" for k, v in headers]
    chunked = any(k.lower() == "transfer-encoding" for k, _ in headers)
    if length != -1 and not chunked:
        lines.append(f"Content-Length: {len(body) if length is None else length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape") + body


def exchange(
    port: int,
    data: bytes,
    *,
    timeout: float = DEADLINE_S,
    half_close: bool = False,
    head_only: bool = False,
    limit: int = 1 << 23,
) -> Answer:
    """Send ``data`` on a new connection and read the answer until the server closes it (the
    requests say ``Connection: close``) or its Content-Length is in, bounded by ``timeout``.
    ``head_only``: a 200's head is enough (an event stream that would never end)."""
    start = time.monotonic()
    received = b""
    error = ""
    timed_out = False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            try:
                sock.sendall(data)
                if half_close:
                    sock.shutdown(socket.SHUT_WR)
            except OSError as exc:  # the server may answer (413) and close before taking it all
                error = f"send: {exc.__class__.__name__}"
            while len(received) < limit:
                remaining = timeout - (time.monotonic() - start)
                if remaining <= 0:
                    timed_out = True
                    break
                sock.settimeout(remaining)
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    timed_out = True
                    break
                except OSError as exc:
                    error = error or f"recv: {exc.__class__.__name__}"
                    break
                if not chunk:
                    break
                received += chunk
                if _complete(received) or (
                    head_only and received.startswith(b"HTTP/1.1 200") and b"\r\n\r\n" in received
                ):
                    break
    except OSError as exc:
        error = f"connect: {exc}"
    head, _, body = received.partition(b"\r\n\r\n")
    status = None
    if head.startswith(b"HTTP/1."):
        try:
            status = int(head.split(b" ", 2)[1])
        except (IndexError, ValueError):
            status = None
    return Answer(status, head, body, time.monotonic() - start, timed_out, error)


def _complete(received: bytes) -> bool:
    head, sep, body = received.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length":
            try:
                return len(body) >= int(value.strip())
            except ValueError:
                return False
        if key.strip().lower() == b"transfer-encoding":
            return body.endswith(b"0\r\n\r\n")
    return False


# -- mutations ---------------------------------------------------------------------------------

WRONG_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    1.5,
    -0.0,
    2**63,
    -(2**63) - 1,
    10**40,
    "",
    " ",
    "x",
    "\u0000",
    "\u202e\u200b",
    [],
    [None],
    {},
    {"": None},
    [[[]]],
    {"__proto__": {"admin": True}},
)
CATEGORIES = (
    "malformed",
    "wrong_type",
    "huge",
    "deep",
    "batch",
    "notification",
    "headers",
    "truncated",
    "oversized",
)


def dumps(value: Any) -> bytes:
    """JSON as a hostile client writes it: big integers and lone surrogates kept as they are."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True).encode()


def huge_string(rng: random.Random) -> tuple[str, str]:
    """A long string of one of several shapes, and its description."""
    size = rng.choice((4096, 65536, 300_000))
    shape = rng.randrange(6)
    if shape == 0:
        return "x" * size, f"'x'*{size}"
    if shape == 1:
        # A long run of capitals: the shape that makes a greedy camel-case split quadratic.
        n = min(size, 20_000)
        return "A" * n + "b", f"'A'*{n}+'b'"
    if shape == 2:
        return "".join(rng.choice("aZ09_-./: ") for _ in range(size // 8)) * 8, f"identifier soup {size}"
    if shape == 3:
        return "\u00e9\U0001f600" * (size // 4), f"non-ASCII {size // 2} chars"
    if shape == 4:
        return ("%41" * (size // 3))[:size], f"'%41'*{size // 3}"
    return "a_" * (size // 2), f"'a_'*{size // 2}"


def deep_value(rng: random.Random) -> tuple[bytes, int]:
    """A deeply nested JSON value as text (never built as Python objects) and its depth."""
    # Around 1000: Python's recursion limit, where a recursive parser or walker gives out.
    depth = rng.choice((64, 600, 950, 990, 1000, 1100, 5000, 50_000))
    if rng.random() < 0.5:
        return b"[" * depth + b"]" * depth, depth
    return b'{"a":' * depth + b"1" + b"}" * depth, depth


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    return out


def _get(doc: dict[str, Any], path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    copy = json.loads(json.dumps(doc))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return copy


PLACEHOLDER = "\u0000__deep__\u0000"


class Mutator:
    """Hostile JSON bodies built from a valid template (a JSON-RPC message or an API body)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def pick_path(self, doc: dict[str, Any], text: bool = False) -> tuple[Any, ...]:
        """A field of ``doc`` to mutate; ``text``: a string field half of the time (what users
        type: queries, names, titles), where text processing is exposed."""
        paths = _paths(doc)
        strings = [p for p in paths if isinstance(_get(doc, p), str) and p[-1] not in ("jsonrpc", "method")]
        if text and strings and self.rng.random() < 0.5:
            return self.rng.choice(strings)
        return self.rng.choice(paths) if paths else ("x",)

    def body(self, category: str, doc: dict[str, Any]) -> tuple[bytes, str]:
        """The mutated body and a short description of what was done to it."""
        rng = self.rng
        valid = dumps(doc)
        if category == "malformed":
            return self.malformed(valid)
        if category == "wrong_type":
            path = self.pick_path(doc)
            value = rng.choice(WRONG_VALUES)
            return dumps(_set(doc, path, value)), f"{'.'.join(map(str, path))}={value!r}"
        if category == "huge":
            path = self.pick_path(doc, text=True)
            kind = rng.randrange(4)
            if kind == 0:
                value, shape = huge_string(rng)
            elif kind == 1:
                power = rng.choice((20, 400, 4000))
                value, shape = 10**power, f"10**{power}"
            elif kind == 2:
                n = rng.choice((1000, 50_000))
                value, shape = {f"k{i}": i for i in range(n)}, f"object of {n} keys"
            else:
                n = rng.choice((1000, 100_000))
                value, shape = list(range(n)), f"array of {n}"
            return dumps(_set(doc, path, value)), f"{'.'.join(map(str, path))}={shape}"
        if category == "deep":
            path = self.pick_path(doc)
            nested, depth = deep_value(rng)
            text = dumps(_set(doc, path, PLACEHOLDER))
            return text.replace(dumps(PLACEHOLDER), nested), f"{'.'.join(map(str, path))}=deep({depth})"
        if category == "batch":
            shape = rng.randrange(5)
            if shape == 0:
                return b"[]", "batch []"
            if shape == 1:
                return b"[" + valid + b"," + valid + b"]", "batch of 2"
            if shape == 2:
                return b"[" + b",".join([valid] * 200) + b"]", "batch of 200"
            if shape == 3:
                return b"[1,2,3]", "batch of numbers"
            return b"[[" + valid + b"]]", "nested batch"
        if category == "notification":
            return self.notification(doc)
        return valid, "valid"

    def malformed(self, valid: bytes) -> tuple[bytes, str]:
        rng = self.rng
        cut = rng.randrange(1, max(2, len(valid)))
        choices: list[tuple[bytes, str]] = [
            (valid[:cut], f"cut at {cut}"),
            (valid + b"}", "trailing brace"),
            (valid + b" garbage", "trailing garbage"),
            (b"\xef\xbb\xbf" + valid, "BOM"),
            (valid.replace(b'"', b"'", 2), "single quotes"),
            (valid[:cut] + b"\xff\xfe" + valid[cut:], "invalid UTF-8"),
            (valid.replace(b'"2.0"', b'"2.0","jsonrpc":"1.0"'), "duplicate key"),
            (b"", "empty"),
            (b"null", "null"),
            (b"12345", "number"),
            (b'"\\ud800"', "lone surrogate"),
            (valid.replace(b"2.0", b"\\ud800", 1), "surrogate version"),
            (b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}', "NaN id"),
            (b'{"jsonrpc":"2.0","id":1e999,"method":"ping"}', "infinite id"),
            (bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))), "random bytes"),
            (valid.replace(b",", b",,", 1), "double comma"),
            (valid.replace(b":", b"\x00:", 1), "NUL byte"),
        ]
        return rng.choice(choices)

    def notification(self, doc: dict[str, Any]) -> tuple[bytes, str]:
        rng = self.rng
        shape = rng.randrange(5)
        if shape == 0 and "id" in doc:
            return dumps({k: v for k, v in doc.items() if k != "id"}), "request without id"
        if shape == 1:
            return dumps({**doc, "id": None}), "id null"
        if shape == 2:
            return dumps({"jsonrpc": "2.0", "id": doc.get("id", 1), "result": {"x": 1}}), "a response"
        if shape == 3:
            bad = {k: v for k, v in doc.items() if k != "id"} | {
                "result": {},
                "error": {"code": 1, "message": "x"},
            }
            return dumps(bad), "notification with result and error"
        return dumps({**doc, "method": "notifications/" + str(doc.get("method"))}), "notification method"


def summarise(request: pytest.FixtureRequest, tallies: list[Tally]) -> list[str]:
    """Per-face lines (for the terminal summary and -s) and every failure, one line each."""
    lines = [t.line(("5xx", "traceback", "internal_path", "slow")) for t in tallies]
    request.config.stash.setdefault(SUMMARY, []).extend(lines)
    print("\n" + "\n".join(lines))
    failures = []
    for t in tallies:
        for category, examples in sorted(t.failures.items()):
            failures += [f"[{t.face}] {category}: {e}" for e in examples[:5]]
            if len(examples) > 5:
                failures.append(f"[{t.face}] {category}: ... and {len(examples) - 5} more")
    return failures
