"""Code over tools (issue 24): ``use_code`` and ``run_code``, one script's run and its calls.

A script (JavaScript, ``codemode/``) runs on a thread of its own within its limits while
every tool call it makes comes back to the event loop and takes the one call pipeline
(``gateway/pipeline.py``) exactly as a direct call by the same caller would: rate limit,
resolve (a tool the caller may not see is the same unknown tool as one that does not
exist), the call policy and the read-only guard, the runner check (``use_code``: read tools
only), validation against the tool's input schema, connections, approvals, quota, fee and
key budget, credential, redaction, and its own audit row tied to the run by ``code_run``.

An inner call that needs a person's approval ends the run: the caller gets the approval
(``ApprovalRequired``, so the in-band ways of asking work as for a runner) with what the
script did before it. Each inner call carries an idempotency key derived from its tool and
arguments, which its approval records, so the same script run again after the approval
uses that approval for that one call without naming it.

The run itself is counted by the rate limiter as a call, is never charged, and leaves its
own audit row after its calls' rows: outcome, reason (how it ended), and in ``detail`` the
script's SHA-256, its calls and their outcomes; never the script or argument values.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import hashlib
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from appliance.access import approvals as approval_store
from appliance.codemode import engine
from appliance.errors import ApplianceError, ApprovalRefused, ApprovalRequired, InvalidParams, Unauthorized
from appliance.gateway import accounting, answers, audit, auth, pipeline, redaction
from appliance.gateway.attempt import Attempt
from appliance.gateway.calls import CODE_RUNNERS, unknown_tool
from appliance.gateway.idempotency import scope_of
from appliance.gateway.runtime import Runtime
from appliance.models import CallResult, Principal

_CODE = {"type": "string", "minLength": 1}
CODE_SCHEMA = {
    "type": "object",
    "properties": {"code": _CODE},
    "required": ["code"],
    "additionalProperties": False,
}
# What tools/list says: a model reads it before every task, so it says only what it needs to
# write a script (docs/code.md has the rest).
CODE_TOOLS: list[dict[str, Any]] = [
    {
        "name": "use_code",
        "description": (
            "Run JavaScript that calls read tools: `await <exact_name>(input)`; returns its return "
            "value and console.log lines. For chains of reads."
        ),
        "inputSchema": CODE_SCHEMA,
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "run_code",
        "description": "As use_code, but any tool (writes, deletes).",
        "inputSchema": CODE_SCHEMA,
        "annotations": {"destructiveHint": True},
    },
]
CODE_NAMES = frozenset(t["name"] for t in CODE_TOOLS)
KEY_RECHECK_S = 1.0  # how stale the run's knowledge that its caller's key is live may be
# A face's way to ask the person at its client for an approval while the script waits: the
# approval's id once decided (yes or no), None when it cannot ask (rpc/inband.asker).
Ask = Callable[[ApprovalRequired], Awaitable[str | None]]
assert CODE_NAMES == CODE_RUNNERS


def limits_of(rt: Runtime) -> engine.Limits:
    s = rt.settings
    return engine.Limits(
        seconds=s.code_seconds,
        memory_bytes=s.code_memory_mb << 20,
        max_calls=s.code_max_calls,
        max_result_bytes=s.code_max_result_bytes,
        max_output_bytes=s.code_max_output_bytes,
    )


@dataclass(slots=True)
class _Call:
    tool: str
    outcome: str = "pending"


@dataclass
class _Host:
    """The engine's side door: each call the script makes, run on the event loop."""

    rt: Runtime
    principal: Principal
    runner: str
    run_id: str
    loop: asyncio.AbstractEventLoop
    stop: threading.Event = field(default_factory=threading.Event)
    made: list[_Call] = field(default_factory=list)
    named: tuple[str, str, str] | None = None  # a retry's approval: (tool, arguments' hash, id)
    asker: Ask | None = None  # pause and ask in band (2025-era sessions whose client can)
    waited: float = 0.0  # seconds spent waiting for a person: they extend the run's time limit
    checked: float = field(default_factory=time.monotonic)  # when the caller's key was last live

    def submit(self, name: str, arguments: str) -> cf.Future[engine.Delivery]:
        call = _Call(name)
        self.made.append(call)
        return asyncio.run_coroutine_threadsafe(self.call(call, name, arguments), self.loop)

    def cancelled(self) -> bool:
        return self.stop.is_set()

    def paused(self) -> float:
        return self.waited

    async def call(self, call: _Call, name: str, text: str) -> engine.Delivery:
        try:
            arguments = orjson.loads(text)
        except orjson.JSONDecodeError:
            call.outcome = "invalid"
            return _failure("the input is not JSON that can be sent (a lone surrogate?)", "invalid_params")
        attempt = self.attempt(name, arguments, self.approval_for(name, arguments))
        try:
            await self.key_live()
            try:
                result = await pipeline.run(self.rt, attempt)
            except ApprovalRequired as exc:
                decided = await self.ask(exc)
                if decided is None:
                    raise
                # The person decided while the script waited: the call again, naming it (a no
                # is refused as approval_denied, with nothing sent).
                attempt = self.attempt(name, arguments, decided)
                result = await pipeline.run(self.rt, attempt)
        except (ApprovalRequired, ApprovalRefused, Unauthorized) as exc:  # these end the run
            call.outcome = exc.reason
            return engine.Delivery(False, end=exc)
        except ApplianceError as exc:  # refused: the same words a direct call gets
            call.outcome = exc.reason
            return _failure(exc.public_message, exc.reason)
        failed = attempt.outcome != "ok" or result.is_error
        call.outcome = (attempt.outcome if attempt.outcome != "ok" else "is_error") if failed else "ok"
        if result.is_error:
            return _failure(_text_of(result) or "the tool failed", attempt.reason or "tool_error")
        return engine.Delivery(True, _value_json(result))

    async def key_live(self) -> None:
        """The run's calls act for the key that started it: a key revoked (or expired) while the
        script runs ends the run at its next call, looked up at most once a second."""
        now = time.monotonic()
        if now - self.checked >= KEY_RECHECK_S:
            self.checked = now
            await auth.still_live(self.rt, self.principal)

    async def ask(self, exc: ApprovalRequired) -> str | None:
        """The person's decision while the script waits (the wait is not the script's time)."""
        if self.asker is None:
            return None
        started = time.monotonic()
        try:
            return await self.asker(exc)
        finally:
            self.waited += time.monotonic() - started

    def attempt(self, name: str, arguments: Any, approval: str | None) -> Attempt:
        return Attempt(
            self.principal,
            name,
            arguments,
            runner=self.runner,
            key=_call_key(name, arguments),
            approval=approval,
            code_run=self.run_id,
        )

    def approval_for(self, name: str, arguments: Any) -> str | None:
        """The approval a retry named, for the one call it was given for (a denied one is
        then refused as such, as a runner's retry is)."""
        if self.named is None or self.named[0] != name or not isinstance(arguments, dict):
            return None
        text = approval_store.canonical(arguments)
        return self.named[2] if approval_store.digest(text) == self.named[1] else None


def _failure(message: str, reason: str) -> engine.Delivery:
    return engine.Delivery(False, orjson.dumps({"message": message, "reason": reason}).decode())


def _call_key(name: str, arguments: Any) -> str:
    """The idempotency key an inner call's approval is asked with: the same call in a later
    run of a script finds that approval once it is given (``gateway/approvals.gate``)."""
    text = approval_store.canonical(arguments)
    return "code:" + hashlib.sha256(f"{name}\n{text}".encode()).hexdigest()[:40]


def _texts(result: CallResult) -> list[str]:
    return [c["text"] for c in result.content if c.get("type") == "text" and isinstance(c.get("text"), str)]


def _text_of(result: CallResult) -> str:
    return "\n".join(_texts(result))


def _value_json(result: CallResult) -> str:
    """A tool's answer as the script gets it: structured content, else its text as JSON when
    it is JSON, else its text; a result without text (an image) as its content list."""
    if result.structured is not None:
        return orjson.dumps(result.structured).decode()
    texts = _texts(result)
    if not texts:
        return orjson.dumps(result.content).decode()
    text = "\n".join(texts)
    try:
        orjson.loads(text)  # JSON already: handed over as it is, parsed once more in the engine
        return text
    except orjson.JSONDecodeError:
        return orjson.dumps(text).decode()


async def run(
    rt: Runtime,
    principal: Principal,
    name: str,
    args: dict[str, Any],
    *,
    approval: str | None = None,
    asker: Ask | None = None,
) -> CallResult:
    """One script run (its arguments already checked against ``CODE_SCHEMA``). ``approval``:
    the approval a retry names (in ``_meta``, or the in-band ways' retry)."""
    if not rt.settings.code_tools:
        raise unknown_tool(name)
    source: str = args["code"]
    try:
        size = len(source.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidParams(
            f"the script is not valid Unicode: a lone surrogate at character {exc.start}", field="/code"
        ) from None
    if "\x00" in source:
        raise InvalidParams(
            f"the script holds a NUL character at {source.index(chr(0))}; write it as \\0", field="/code"
        )
    if size > rt.settings.code_max_source_bytes:
        raise InvalidParams(
            f"the script is {size} bytes; at most {rt.settings.code_max_source_bytes} are accepted",
            field="/code",
            data={"limit": rt.settings.code_max_source_bytes, "length": size},
        )
    host = _Host(rt, principal, name, secrets.token_hex(8), asyncio.get_running_loop(), asker=asker)
    if approval is not None:
        host.named = await _named(rt, principal, approval)
    attempt = Attempt(principal, name, runner=name, code_run=host.run_id)
    try:
        accounting.limit(rt, principal)  # the run is a call of its own to the rate limiter
    except ApplianceError as exc:
        audit.classify(attempt, exc)
        await audit.script(rt, attempt)
        raise
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    try:
        outcome = await _in_thread(rt, source, limits_of(rt), host)
    except BaseException:
        host.stop.set()  # cancelled: the engine ends at its next step
        attempt.outcome, attempt.reason = "blocked", "interrupted"
        attempt.detail = _detail(digest, host.made)
        audit.interrupted(rt, attempt)
        raise
    attempt.detail = _detail(digest, host.made, outcome)
    if isinstance(outcome.ending, ApplianceError):  # waits for a person, refused, or revoked
        attempt.outcome, attempt.reason = "blocked", outcome.ending.reason
        await audit.script(rt, attempt)
        if isinstance(outcome.ending, ApprovalRequired):
            raise _waiting(outcome.ending, host.made)
        raise outcome.ending
    attempt.outcome = "ok" if outcome.ok else "is_error"
    attempt.reason = None if outcome.ok else outcome.reason
    answer = await _answer(rt, host, outcome)
    attempt.bytes = len(answer.content[0]["text"])
    await audit.script(rt, attempt)
    return answer


async def _named(rt: Runtime, principal: Principal, approval_id: str) -> tuple[str, str, str] | None:
    found = await rt.db.reading(lambda r: approval_store.get(r, approval_id))
    if found is None or found.principal != scope_of(principal):
        return None  # not this caller's: every inner call asks as if none were named
    return found.tool, found.args_hash, found.id


async def _in_thread(rt: Runtime, source: str, limits: engine.Limits, host: _Host) -> engine.Outcome:
    """The run on a thread of its own: a QuickJS runtime stays on the thread that made it,
    and the engine lets go of the interpreter lock while JavaScript runs. The thread holds one
    of ``code_runs_at_once`` places until it ends, even when its caller left (it then stops at
    its next step, or at its time limit)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[engine.Outcome] = loop.create_future()
    slots = rt.code_slots
    try:  # a place, within the run's own time: scripts waiting behind others never pile up
        await asyncio.wait_for(slots.acquire(), timeout=limits.seconds)
    except TimeoutError:
        busy = f"no place to run within {limits.seconds:g} s: {rt.settings.code_runs_at_once} script(s) ran"
        return engine.Outcome(ok=False, reason="code_busy", error=busy + " the whole time; try again")

    def work() -> None:
        try:
            out = engine.run(source, limits, host)
        except BaseException as exc:  # noqa: BLE001 - a bug of ours: the caller's task gets it
            loop.call_soon_threadsafe(_settle, done, None, exc)
        else:
            loop.call_soon_threadsafe(_settle, done, out, None)
        finally:
            loop.call_soon_threadsafe(slots.release)

    try:
        threading.Thread(target=work, name=f"code-{host.run_id}", daemon=True).start()
    except BaseException:
        slots.release()
        raise
    return await done


def _settle(fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


def _detail(digest: str, made: list[_Call], outcome: engine.Outcome | None = None) -> str:
    counts: dict[str, int] = {}
    for c in made:
        counts[c.outcome] = counts.get(c.outcome, 0) + 1
    doc: dict[str, Any] = {"sha256": digest, "calls": len(made), "outcomes": counts}
    if outcome is not None:
        doc["engine_ms"] = round(outcome.started_ms, 2)
    return orjson.dumps(doc).decode()


async def _answer(rt: Runtime, host: _Host, outcome: engine.Outcome) -> CallResult:
    """What the caller gets: the result and log lines, or why the run ended and what it did
    first. Redacted again: a script sees only redacted answers, but its own text is its own."""
    red = await redaction.redactor(rt)
    value: dict[str, Any] = {"run": host.run_id, "calls": len(host.made)}
    if outcome.ok:
        value["result"] = outcome.result
    else:
        value["error"] = red.text(outcome.error or outcome.reason)
        value["reason"] = outcome.reason
        value["calls"] = [{"tool": c.tool, "outcome": c.outcome} for c in host.made]
    if outcome.logs:
        value["logs"] = [red.text(line) for line in outcome.logs]
    if red and "result" in value:
        value["result"] = orjson.loads(red.text(orjson.dumps(value["result"]).decode()))
    out = answers.json_result(value)
    return out if outcome.ok else CallResult(content=out.content, structured=out.structured, is_error=True)


def _waiting(exc: ApprovalRequired, made: list[_Call]) -> ApprovalRequired:
    """An inner call waits for a person: the run ended there. The approval's own answer, told
    as a script's: what ran before, and that running the same script again uses it."""
    before = [c for c in made if c.outcome not in ("approval_required", "pending")]
    ran = ", ".join(f"{c.tool} ({c.outcome})" for c in before) or "none"
    message = (
        f"{exc.public_message.split(' Once approved,')[0]} The script ended at this call; the calls "
        f"before it ran: {ran}. Once approved, run the same script again: that call then uses the "
        "approval, once."
    )
    data = {**exc.data, "script": {"calls": [{"tool": c.tool, "outcome": c.outcome} for c in made]}}
    out = ApprovalRequired(message, data=data)
    out.approval = exc.approval
    return out
