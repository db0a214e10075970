"""Large results kept aside: a bridge call's result over the threshold becomes an artifact.

The pipeline's keep-aside stage (after redaction, so what is stored holds no vault secret)
stores a result larger than ``artifact_threshold_bytes`` as an artifact owned by the caller
(an agent's result by that agent, a user's own call's by the user) and answers with its
head, its size and a random handle. ``read_result``, a bridge tool, reads a byte range,
lines, the lines holding a text, or a JSON path of it. Reading follows the rules of the call
that made it: only the same caller, and only while it still sees the tool; anyone else is
told there is no such result, exactly as if it had expired. Like search it is free and
unaudited (rate-limited as browsing); what it reads was fetched, capped, charged and audited
once, by the call.

Only calls that can reach ``read_result`` keep results aside: the bridge's runners and a
``tools/call`` by full name on the bridge. ``/mcp/<slug>`` and ``toolspoke call`` answer
whole as before. A result below the threshold costs one comparison here.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from typing import Any

import orjson

from appliance.access import visibility
from appliance.artifacts import reading
from appliance.artifacts import store as artifact_store
from appliance.db import SyncReader
from appliance.errors import ApplianceError, InvalidParams, NotFound
from appliance.gateway.attempt import Attempt
from appliance.gateway.idempotency import scope_of
from appliance.gateway.runtime import Runtime
from appliance.models import CallResult, Principal

log = logging.getLogger(__name__)
PREFIX = "res_"
_HANDLE = re.compile(r"res_[A-Za-z0-9_-]{24}")
READ_CAP = 16384  # bytes of one read when the threshold is 0 (results kept earlier stay readable)
MAX_LINES = 1000
MODES = ("offset", "line", "match", "path")


def limits(rt: Runtime) -> artifact_store.Limits:
    s = rt.settings
    return artifact_store.Limits(
        s.artifact_owner_bytes, s.artifact_total_bytes, s.artifact_retention_h * 3600
    )


def body_of(result: CallResult) -> bytes:
    """The text a kept result is: its text parts, else its structured content as JSON."""
    texts = [p["text"] for p in result.content if p.get("type") == "text" and isinstance(p.get("text"), str)]
    if texts:
        return "\n".join(texts).encode()
    return orjson.dumps(result.structured) if result.structured is not None else b""


def due(rt: Runtime, attempt: Attempt) -> bool:
    """Whether the keep-aside stage has anything to do (a comparison, not a coroutine, per call)."""
    return attempt.aside and attempt.bytes > rt.settings.artifact_threshold_bytes > 0


async def keep_aside(rt: Runtime, attempt: Attempt) -> None:
    """Stage: a result over the threshold stored, and its answer made its head and handle."""
    threshold = rt.settings.artifact_threshold_bytes
    result, tool = attempt.result, attempt.tool
    assert result is not None and tool is not None
    body = body_of(result)
    if len(body) <= threshold:  # large in parts that are not text (an image): answered whole
        return
    handle = PREFIX + secrets.token_urlsafe(18)
    new = artifact_store.NewArtifact(
        handle,
        scope_of(attempt.principal),
        tool.toolkit_id,
        tool.id,
        tool.name,
        body,
        reading.count_lines(body),
    )
    try:
        why = await rt.db.writing(lambda w: artifact_store.keep_in(w, new, time.time(), limits(rt)))
    except ApplianceError as exc:  # the call happened: its answer must not be lost to storage
        why = exc.reason
    if why is not None:
        log.info("a %d-byte result of %s was not kept aside (%s); answered whole", len(body), tool.name, why)
        attempt.result = CallResult(
            result.content,
            result.structured,
            result.is_error,
            {**result.meta, "artifact": {"kept": False, "reason": why}},
        )
        return
    attempt.result = _headed(rt, result, new)


def _headed(rt: Runtime, result: CallResult, new: artifact_store.NewArtifact) -> CallResult:
    head, _ = reading.whole_chars(
        new.body[: min(rt.settings.artifact_head_bytes, rt.settings.artifact_threshold_bytes)], at_start=False
    )
    size = len(new.body)
    note = (
        f"[{size} bytes, {new.lines} lines; above are the first {len(head)}. The rest is kept for "
        f"{rt.settings.artifact_retention_h:g} h: read_result handle={new.handle!r} with offset (bytes), "
        "line (from 1), match (literal text, from line) or path (JSON: a.b[0]).]"
    )
    meta = {
        **result.meta,
        "artifact": {"handle": new.handle, "bytes": size, "lines": new.lines, "head": len(head)},
    }
    content = [{"type": "text", "text": head.decode()}, {"type": "text", "text": note}]
    return CallResult(content, None, result.is_error, meta)


def _handle(value: Any) -> str:
    if not isinstance(value, str) or not _HANDLE.fullmatch(value):
        raise InvalidParams("'handle' must be a result handle as its answer gave it (res_…)", field="handle")
    return value


def _whole(args: dict[str, Any], name: str, floor: int) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < floor:
        raise InvalidParams(f"'{name}' must be an integer of at least {floor}", field=name)
    return value


async def read_result(rt: Runtime, principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """``read_result``: one part of the caller's kept result, at most one read's worth (the
    threshold's bytes, or ``MAX_LINES`` lines); each answer says where the next one starts."""
    handle = _handle(args.get("handle"))
    given = [m for m in MODES if args.get(m) is not None]
    if len(given) > 1 and given != ["line", "match"]:  # a line with a match: search from there
        raise InvalidParams(f"give one of {', '.join(MODES)} (got {', '.join(given)})", field=given[1])
    offset, line = _whole(args, "offset", 0), _whole(args, "line", 1)
    what = reading.needle(args["match"]) if args.get("match") is not None else None
    steps = reading.parse_path(args["path"]) if args.get("path") is not None else None
    cap = rt.settings.artifact_threshold_bytes or READ_CAP
    owner, now = scope_of(principal), time.time()

    def part(r: SyncReader, kept: artifact_store.Kept) -> dict[str, Any]:
        if what is not None:
            return reading.matching(artifact_store.body_in(r, handle), what, MAX_LINES, cap, line or 1)
        if line is not None:
            return reading.lines(artifact_store.body_in(r, handle), line, MAX_LINES, cap)
        if steps is not None:
            return reading.at_path(artifact_store.body_in(r, handle), steps, cap)
        start = offset or 0
        text, skip = reading.whole_chars(artifact_store.slice_in(r, handle, start, cap))
        end = start + skip + len(text)
        more = {"end": True} if end >= kept.bytes else {"next_offset": end}
        return {"offset": start + skip, "text": text.decode(), **more}

    def read(r: SyncReader) -> dict[str, Any] | None:
        kept = artifact_store.find_in(r, handle, owner, now)
        if kept is None or not visibility.scope_in(r, principal).sees_tool(kept.toolkit_id, kept.tool_id):
            return None  # another's, expired, or its tool out of sight now: all alike
        about = {"handle": handle, "tool": kept.tool, "bytes": kept.bytes, "lines": kept.lines}
        return {**about, **part(r, kept)}

    answer = await rt.db.reading(read)
    if answer is None:
        raise NotFound(
            f"no kept result {handle!r} for you: results expire after {rt.settings.artifact_retention_h:g} h",
            field="handle",
        )
    return answer


async def prune(rt: Runtime) -> None:
    """Expired results dropped (at start; every store prunes too)."""
    gone = await rt.db.writing(lambda w: artifact_store.prune_in(w, time.time()))
    if gone:
        log.info("%d expired kept results pruned", gone)


__all__ = ["body_of", "due", "keep_aside", "prune", "read_result"]
