"""How one read picks a part of a kept result (pure): a byte range, lines, matching lines, a JSON path.

Everything here runs on a stored upstream answer and on what an agent asks of it, both
hostile, so each read is linear in the body: a match is a literal substring (``bytes.find``,
no pattern language and so no backtracking), a JSON path a dotted walk of keys and indices
parsed by hand. Every answer is bounded by the caller's ``cap`` in bytes and says when it
stopped early and where to go on.
"""

from __future__ import annotations

from typing import Any

import orjson

from appliance.errors import InvalidParams

MAX_NEEDLE = 200  # characters of a match
MAX_PATH = 256  # characters of a JSON path
MAX_STEPS = 32
EXCERPT = 400  # bytes of a matching line shown around its first match
MAX_KEYS = 50  # keys or length shown of a value too large to give whole


def whole_chars(part: bytes, *, at_start: bool = True) -> tuple[bytes, int]:
    """``part`` trimmed to whole UTF-8 characters: continuation bytes dropped at its start (when
    it begins mid-character) and an incomplete character at its end; and how many bytes were
    dropped at the start."""
    skip = 0
    if at_start:
        while skip < len(part) and skip < 3 and part[skip] & 0xC0 == 0x80:
            skip += 1
    end = len(part)
    back = end - 1
    while back >= skip and end - back <= 4 and part[back] & 0xC0 == 0x80:
        back -= 1
    if back >= skip and part[back] >= 0xC0:  # a lead byte: is its character complete?
        need = 2 if part[back] < 0xE0 else 3 if part[back] < 0xF0 else 4
        if end - back < need:
            end = back
    return part[skip:end], skip


def count_lines(body: bytes) -> int:
    return body.count(b"\n") + (1 if body and not body.endswith(b"\n") else 0)


def lines(body: bytes, first: int, count: int, cap: int) -> dict[str, Any]:
    """Lines ``first`` (1-based) onward, at most ``count`` of them and ``cap`` bytes in all."""
    pos = _offset_of_line(body, first)
    out: list[str] = []
    used = 0
    while len(out) < count and pos < len(body):
        nl = body.find(b"\n", pos)
        stop = len(body) if nl < 0 else nl
        if used + (stop - pos) > cap:
            if not out:  # one line longer than a whole read: its start, and the offset to go on
                part, _ = whole_chars(body[pos : pos + cap], at_start=False)
                return {"line": first, "lines": [part.decode()], "cut": True, "next_offset": pos + len(part)}
            break
        out.append(body[pos:stop].decode())
        used += stop - pos + 1
        pos = stop + 1
    answer: dict[str, Any] = {"line": first, "lines": out}
    if pos >= len(body):
        answer["end"] = True
    else:
        answer["next_line"] = first + len(out)
    return answer


def needle(match: Any) -> bytes:
    if not isinstance(match, str) or not 1 <= len(match) <= MAX_NEEDLE or "\n" in match:
        raise InvalidParams(
            f"'match' must be text of 1 to {MAX_NEEDLE} characters on one line (matched literally)",
            field="match",
        )
    return match.encode()


def matching(body: bytes, what: bytes, count: int, cap: int, first: int = 1) -> dict[str, Any]:
    """The lines holding ``what`` (literally), numbered, from line ``first`` on: at most
    ``count`` lines and ``cap`` bytes. One pass: each find starts past the last line found."""
    pos = _offset_of_line(body, first)
    line_no, counted_to = first, pos
    out: list[dict[str, Any]] = []
    used = 0
    while len(out) < count:
        hit = body.find(what, pos)
        if hit < 0:
            return {"match": what.decode(), "found": out, "end": True}
        line_no += body.count(b"\n", counted_to, hit)
        start = body.rfind(b"\n", 0, hit) + 1
        stop = body.find(b"\n", hit)
        stop = len(body) if stop < 0 else stop
        lo = max(start, hit - EXCERPT // 2)
        hi = min(stop, hit + len(what) + EXCERPT // 2)
        text, _ = whole_chars(body[lo:hi], at_start=lo > start)
        if used + len(text) > cap and out:
            break
        item: dict[str, Any] = {"line": line_no, "text": text.decode(errors="replace")}
        if lo > start or hi < stop:
            item["cut"] = True
        out.append(item)
        used += len(text) + 16
        pos = counted_to = stop  # the rest of this line is not searched again
    return {"match": what.decode(), "found": out, "next_line": out[-1]["line"] + 1}


def _offset_of_line(body: bytes, n: int) -> int:
    """Where line ``n`` (1-based) starts; the body's end when it has fewer lines."""
    pos = 0
    for _ in range(n - 1):
        nl = body.find(b"\n", pos)
        if nl < 0:
            return len(body)
        pos = nl + 1
    return pos


def parse_path(path: Any) -> list[str | int]:
    """``a.b[0].c`` (a leading ``$`` allowed) as steps: keys and indices. Keys hold no ``.``,
    ``[`` or ``]``; an index is digits in brackets."""
    if not isinstance(path, str) or not 1 <= len(path) <= MAX_PATH:
        raise InvalidParams(f"'path' must be text of 1 to {MAX_PATH} characters, like a.b[0].c", field="path")
    text = path[1:] if path.startswith("$") else path
    steps: list[str | int] = []
    i, n = 0, len(text)
    expect_key = not text.startswith(("[", "."))
    while i < n:
        ch = text[i]
        if ch == ".":
            if expect_key and i > 0:
                raise InvalidParams(f"'path': an empty key at character {i + 1}", field="path")
            i += 1
            expect_key = True
            continue
        if ch == "[":
            close = text.find("]", i)
            digits = text[i + 1 : close] if close > 0 else ""
            if not digits.isascii() or not digits.isdigit() or len(digits) > 9:
                raise InvalidParams(f"'path': expected an index like [0] at character {i + 1}", field="path")
            steps.append(int(digits))
            i = close + 1
            expect_key = False
            continue
        if not expect_key:
            raise InvalidParams(f"'path': expected '.' or '[' at character {i + 1}", field="path")
        j = i
        while j < n and text[j] not in ".[]":
            j += 1
        if j < n and text[j] == "]":
            raise InvalidParams(f"'path': unexpected ']' at character {j + 1}", field="path")
        steps.append(text[i:j])
        i, expect_key = j, False
        if len(steps) > MAX_STEPS:
            raise InvalidParams(f"'path' has more than {MAX_STEPS} steps", field="path")
    if text.endswith(".") and text != ".":
        raise InvalidParams("'path' ends with '.'", field="path")
    return steps


def at_path(body: bytes, steps: list[str | int], cap: int) -> dict[str, Any]:
    """The value at ``steps`` in the body read as JSON; whole when it fits ``cap``, else its
    shape (type, size, first keys) and the start of its JSON."""
    try:
        node: Any = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidParams(
            "'path': this result is not JSON; read it by offset, line or match", field="path"
        ) from exc
    for k, step in enumerate(steps):
        where = _render(steps[:k]) or "the top"
        if isinstance(step, int):
            if not isinstance(node, list) or step >= len(node):
                size = f"an array of {len(node)}" if isinstance(node, list) else f"a {_kind(node)}"
                raise InvalidParams(f"'path': no index [{step}] in {where} ({size})", field="path")
        elif not isinstance(node, dict) or step not in node:
            raise InvalidParams(f"'path': no key {step!r} in {where} (a {_kind(node)})", field="path")
        node = node[step]
    text = orjson.dumps(node)
    answer: dict[str, Any] = {"path": _render(steps) or "$"}
    if len(text) <= cap:
        return {**answer, "value": node}
    shape: dict[str, Any] = {"type": _kind(node), "bytes": len(text)}
    if isinstance(node, dict):
        shape["keys"] = list(node)[:MAX_KEYS]
    elif isinstance(node, list):
        shape["length"] = len(node)
    part, _ = whole_chars(text[:cap], at_start=False)
    return {**answer, **shape, "text": part.decode(), "cut": True}


def _kind(node: Any) -> str:
    if isinstance(node, dict):
        return "object"
    if isinstance(node, list):
        return "array"
    if isinstance(node, str):
        return "string"
    if isinstance(node, bool):
        return "boolean"
    if node is None:
        return "null"
    return "number"


def _render(steps: list[str | int]) -> str:
    out = ""
    for s in steps:
        out += f"[{s}]" if isinstance(s, int) else (f".{s}" if out else s)
    return out
