"""Idempotency keys on ``tools/call`` (RELIABILITY LEDGER-05, after Stripe's and brandur's design).

A client puts ``"toolspoke/idempotencyKey": "<key>"`` in the request's ``params._meta``.
The first request with a key claims it (a unique insert: atomic); its result, ``isError``
results and upstream failures included, is stored and replayed to every retry, so one key
makes at most one upstream call and one charge. A retry whose call differs (another tool,
other arguments, another ``/mcp/<slug>``) gets ``-32004 idempotency_key_reused``; one that
arrives while the first still runs gets ``-32004 idempotency_in_progress``. Neither runs
anything. A refusal before anything left (rate limit, quota, bad input) frees the key, as
Stripe does for validation failures. A call cut off mid-flight (the client went away, the
process was killed) stores an ``interrupted`` result: the upstream may have acted, so the
key never runs the call a second time.

The call pipeline's request stage (``gateway/tool_requests.py``) claims the key, replays or
refuses a retry (a retry counts against the rate limit and leaves its audit row), and
stores the result; this module holds the rules and the writes.

Keys belong to the caller (an agent's to the agent, a user's own keys to the user): another
caller's identical key is simply another key and never sees this one's result. Keys are
pruned after ``TOOLSPOKE_IDEMPOTENCY_RETENTION_H`` (at least 24 h). A request without a key
costs one dict lookup here and no database work.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import orjson

from appliance.errors import IdempotencyConflict, InvalidParams
from appliance.gateway.runtime import Runtime
from appliance.ledger import idempotency as store
from appliance.models import CallResult, Principal
from appliance.protocol.meta import IDEMPOTENCY_KEY

log = logging.getLogger(__name__)
META_KEY = IDEMPOTENCY_KEY
MAX_KEY = 255
PRUNE_EVERY_S = 3600.0
INTERRUPTED = CallResult(
    content=[
        {
            "type": "text",
            "text": "the first call with this idempotency key was interrupted before its result "
            "was stored; the upstream may have acted. Use a new key to call again.",
        }
    ],
    is_error=True,
    meta={"reason": "interrupted"},
)

_pruned_at: dict[int, float] = {}  # per database, by id: when its keys were last pruned
_finishing: set[asyncio.Task[None]] = set()  # interrupted results being stored while unwinding


def key_of(params: dict[str, Any]) -> str | None:
    """The request's idempotency key (None: it has none); a malformed one is refused by name."""
    meta = params.get("_meta")
    if not isinstance(meta, dict) or META_KEY not in meta:
        return None
    key = meta[META_KEY]
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY or not key.isprintable():
        raise InvalidParams(
            f"'_meta.{META_KEY}' must be a string of 1 to {MAX_KEY} printable characters",
            field=f"_meta.{META_KEY}",
        )
    return key


def scope_of(principal: Principal) -> str:
    if principal.operator:
        return "operator"
    if principal.agent_id is not None:
        return f"agent:{principal.agent_id}"
    return f"user:{principal.user_id}"


def request_hash(target: str, name: str, arguments: dict[str, Any]) -> str:
    doc = orjson.dumps([target, name, arguments], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(doc).hexdigest()


def _dump(result: CallResult) -> str:
    doc = {"content": result.content, "structured": result.structured, "is_error": result.is_error}
    return orjson.dumps({**doc, "meta": result.meta}).decode()


def _load(text: str) -> CallResult:
    doc = orjson.loads(text)
    meta = {**doc["meta"], "idempotentReplay": True}
    return CallResult(doc["content"], doc["structured"], doc["is_error"], meta)


@dataclass(frozen=True, slots=True)
class Claim:
    """A keyed request's hold on its key: ``held`` is None when this request owns it now,
    else the row an earlier request with the same key left (running, or done)."""

    scope: str
    key: str
    digest: str
    held: store.Claimed | None


async def claim(
    rt: Runtime, principal: Principal, key: str, *, target: str, name: str, arguments: dict[str, Any]
) -> Claim:
    """Claim (caller, key) for this call with a unique insert: of two requests with one key,
    exactly one owns it."""
    scope = scope_of(principal)
    digest = request_hash(target, name, arguments)
    now = time.time()
    prune_before = None
    if now - _pruned_at.get(id(rt.db), 0.0) > PRUNE_EVERY_S:
        prune_before = now - rt.settings.idempotency_retention_h * 3600
        _pruned_at[id(rt.db)] = now
    held = await rt.db.writing(lambda w: store.claim(w, scope, key, digest, now, prune_before))
    return Claim(scope, key, digest, held)


def stored(claim: Claim) -> CallResult:
    """The result a retry replays, or the conflict it gets instead (nothing runs either way)."""
    held = claim.held
    assert held is not None
    if held.request_hash != claim.digest:
        raise IdempotencyConflict(
            "this idempotency key was used for a different call (another tool or other "
            "arguments); nothing was run. Use a new key for a new call.",
            reason="idempotency_key_reused",
            field=f"_meta.{META_KEY}",
        )
    if held.state != "done" or held.result is None:
        raise IdempotencyConflict(
            "the first call with this idempotency key is still running; nothing was run. "
            "Retry shortly to get its result.",
            reason="idempotency_in_progress",
            field=f"_meta.{META_KEY}",
        )
    return _load(held.result)


async def finish(rt: Runtime, claim: Claim, result: CallResult) -> None:
    """The call's result, stored for every retry (``isError`` results and failures included)."""
    text = _dump(result)
    await rt.db.writing(lambda w: store.finish(w, claim.scope, claim.key, text))


async def release(rt: Runtime, claim: Claim) -> None:
    """Refused before anything left (or its record failed): a retry may run it."""
    await rt.db.writing(lambda w: store.release(w, claim.scope, claim.key))


def interrupted(rt: Runtime, claim: Claim) -> None:
    """Cut off mid-call: the upstream may have acted, so the key never runs the call again.
    Stored as we unwind, not awaited."""
    task = asyncio.ensure_future(_finish_quietly(rt, claim))
    _finishing.add(task)
    task.add_done_callback(_finishing.discard)


async def _finish_quietly(rt: Runtime, claim: Claim) -> None:
    try:
        await finish(rt, claim, INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - nobody awaits this; start-up recovery settles it
        log.warning("idempotency key left running (settled at next start): %s", exc)


async def recover(rt: Runtime) -> int:
    """At start-up of the serving process: claims a killed process left running get the
    ``interrupted`` result (never run twice). The number recovered."""
    text = _dump(INTERRUPTED)
    n: int = await rt.db.writing(lambda w: store.recover(w, text))
    return n
