"""One script run in an embedded JavaScript engine, within its limits (issue 24).

The engine is QuickJS (the quickjs-ng fork, through its ``quickjs`` binding): about 1.2 MB
of native code against V8's 80 MB (mini-racer), a context made in about 0.15 ms, a memory
limit the runtime enforces on every allocation, a stack limit, and an interrupt that stops an
endless loop and that the script cannot catch, asked by the wall clock (``interrupt.py``). A
bare context has no file, network, process, module or timer access; ``prelude.py`` removes the
little that could block.

``run`` drives one script on the calling thread from start to end (a QuickJS runtime must
stay on the thread that made it, so the gateway gives each run a thread of its own). The
script never calls into Python: each step (the script's start, then each job of its
promise queue) is stopped by the interrupt once the run's wall time is spent; between
steps ``run`` takes the outbox (calls, log lines, the end), hands calls to the ``Host`` (at
most ``max_in_flight`` at once) and delivers what they answered. So the script's calls run
concurrently in the gateway while the engine thread waits, and no Python runs inside a step.

Every way a run can end is an ``Outcome`` with a reason: ``ok``, ``script_error`` (it threw,
or did not parse), ``script_stalled`` (it awaits something nothing will settle),
``code_time_limit``, ``code_memory_limit``, ``code_call_limit``, ``code_output_limit``,
``code_result_limit``, ``cancelled``, or ``call_ended`` (an inner call's answer ends the
run, e.g. one that waits for a person's approval; ``Outcome.ending`` carries it).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
import quickjs

from appliance.codemode import interrupt
from appliance.codemode.prelude import PRELUDE, names_json, tool_names_in, wrap

_GLUE = ("__names", "__deliver", "__start", "__take")
_POLL_S = 0.25  # how often a wait for calls looks at the deadline and the caller's cancel


@dataclass(frozen=True, slots=True)
class Limits:
    seconds: float = 30.0
    memory_bytes: int = 64 << 20
    max_calls: int = 50
    max_result_bytes: int = 1 << 20  # one inner call's value as the script gets it
    max_output_bytes: int = 64 << 10  # the log lines and the result together
    max_in_flight: int = 8
    stack_bytes: int = 512 << 10


@dataclass(slots=True)
class Delivery:
    """What one inner call answered: its value (``ok``) or ``{"message", "reason"}``, as JSON
    text, or ``end``: something that ends the run instead (the host's own object)."""

    ok: bool
    body: str = "null"
    end: Any = None


class Host(Protocol):
    def submit(self, name: str, arguments: str) -> cf.Future[Delivery]: ...

    def cancelled(self) -> bool: ...

    def paused(self) -> float:
        """Seconds the run waited for a person (an approval asked in band): not the script's
        time, so its wall-time limit is extended by them."""
        ...


@dataclass(slots=True)
class Outcome:
    ok: bool
    reason: str = "ok"
    result: Any = None
    error: str | None = None
    logs: list[str] = field(default_factory=list)
    calls: int = 0  # inner calls the script made (handed to the host)
    output_bytes: int = 0
    ending: Any = None  # call_ended: the delivery's ``end``
    started_ms: float = 0.0  # the engine's start-up: context, prelude, the script compiled


class _Ended(Exception):
    def __init__(self, reason: str, message: str, ending: Any = None):
        super().__init__(message)
        self.reason, self.message, self.ending = reason, message, ending


def run(source: str, limits: Limits, host: Host) -> Outcome:
    """The script from its first line to its end (see the module's doc for the reasons)."""
    return _Run(source, limits, host).go()


class _Run:
    def __init__(self, source: str, limits: Limits, host: Host):
        self.source, self.limits, self.host = source, limits, host
        self.begun = time.monotonic()
        self.deadline = self.begun + limits.seconds
        self.out = Outcome(ok=False)
        self.queued: deque[tuple[int, str, str]] = deque()
        self.flying: dict[cf.Future[Delivery], int] = {}
        self.ctx = quickjs.Context()
        # Stopped by the wall clock and the caller's cancel (interrupt.py); None: this binding
        # is not the one known there, and each step gets the binding's CPU-time limit instead.
        self.wall = interrupt.install(self.ctx, self.should_stop)

    def should_stop(self) -> bool:
        return self.left() <= 0 or self.host.cancelled()

    def left(self) -> float:
        return self.deadline + self.host.paused() - time.monotonic()

    def step(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One entry into JavaScript, stopped when the run's wall time is spent."""
        left = self.left()
        if left <= 0:
            raise _Ended("code_time_limit", f"the script ran past its {self.limits.seconds:g} s limit")
        if self.wall is None:
            self.ctx.set_time_limit(left)
        return fn(*args)

    def go(self) -> Outcome:
        out = self.out
        try:
            self.start()
            self.loop()
        except _Ended as end:
            out.reason, out.error, out.ending = end.reason, end.message, end.ending
        except quickjs.StackOverflow as exc:  # uncaught by the script
            out.reason, out.error = "script_error", _first_lines(str(exc))
        except quickjs.JSException as exc:
            out.reason, out.error = self.classify(str(exc))
        finally:
            for fut in self.flying:  # the run is over: what it still awaited is let go
                fut.cancel()
        if out.reason == "ok":
            out.ok = True
        return out

    def start(self) -> None:
        ctx = self.ctx
        ctx.set_memory_limit(self.limits.memory_bytes)
        ctx.set_max_stack_size(self.limits.stack_bytes)
        self.step(ctx.eval, PRELUDE)
        names, self.deliver, begin, self.take = (ctx.get(n) for n in _GLUE)
        self.step(ctx.eval, "".join(f"delete globalThis.{n};" for n in _GLUE))
        self.step(names, names_json(tool_names_in(self.source)))
        try:
            main = self.step(ctx.eval, wrap(self.source))
        except (UnicodeEncodeError, ValueError) as exc:  # the binding takes C strings of UTF-8
            raise _Ended("script_error", f"the script's text cannot be run: {exc}") from None
        except quickjs.JSException as exc:
            if "interrupted" in str(exc) or self.left() <= 0:
                raise
            raise _Ended("script_error", _first_lines(str(exc))) from None
        self.out.started_ms = (time.monotonic() - self.begun) * 1000
        promise = self.step(main)
        self.step(begin, promise)

    def loop(self) -> None:
        while True:
            self.drain()
            if self.collect():
                return
            self.dispatch()
            if not self.flying:
                raise _Ended(
                    "script_stalled",
                    "the script awaits something that nothing will settle (no tool call is pending)",
                )
            self.wait()

    def drain(self) -> None:
        """Every job of the promise queue (a chain of jobs may be endless: the deadline holds)."""
        while True:
            if self.host.cancelled():
                raise _Ended("cancelled", "the caller cancelled the run")
            if not self.step(self.ctx.execute_pending_job):
                return

    def collect(self) -> bool:
        """The outbox: log lines and calls are counted against their limits; True at the end."""
        box = _loads(self.step(self.take))
        out, limits = self.out, self.limits
        for line in box["logs"]:
            out.output_bytes += len(line.encode("utf-8", "replace")) + 1
            if out.output_bytes > limits.max_output_bytes:
                raise self.too_much()
            out.logs.append(line)
        for call_id, name, args in box["calls"]:
            out.calls += 1
            if out.calls > limits.max_calls:
                out.calls -= 1
                raise _Ended("code_call_limit", f"the script made more than {limits.max_calls} tool calls")
            self.queued.append((call_id, name, args))
        if box["done"] is None:
            return False
        ok, body = box["done"]
        out.output_bytes += len(body.encode("utf-8", "replace"))
        if out.output_bytes > limits.max_output_bytes:
            raise self.too_much()
        value = _loads(body)
        if ok:
            out.reason, out.result = "ok", value
        elif self.out_of_memory(value if isinstance(value, str) else body):
            out.reason, out.error = self.classify("out of memory")
        else:
            out.reason, out.error = "script_error", value if isinstance(value, str) else body
        return True

    def too_much(self) -> _Ended:
        return _Ended("code_output_limit", f"the script's output passed {self.limits.max_output_bytes} bytes")

    def dispatch(self) -> None:
        while self.queued and len(self.flying) < self.limits.max_in_flight:
            call_id, name, args = self.queued.popleft()
            self.flying[self.host.submit(name, args)] = call_id

    def wait(self) -> None:
        """Until at least one call answers; each answer is delivered in the order they came."""
        while True:
            if self.host.cancelled():
                raise _Ended("cancelled", "the caller cancelled the run")
            left = self.left()
            if left <= 0:
                raise _Ended("code_time_limit", f"the script ran past its {self.limits.seconds:g} s limit")
            done, _ = cf.wait(self.flying, timeout=min(left, _POLL_S), return_when=cf.FIRST_COMPLETED)
            if done:
                break
        for fut in [f for f in self.flying if f in done]:
            call_id = self.flying.pop(fut)
            got = fut.result()
            if got.end is not None:
                raise _Ended("call_ended", "a tool call ended the run", got.end)
            if len(got.body) > self.limits.max_result_bytes:
                raise _Ended(
                    "code_result_limit",
                    f"a tool's answer passed the {self.limits.max_result_bytes}-byte limit of one result",
                )
            self.step(self.deliver, call_id, got.ok, got.body)

    def out_of_memory(self, text: str) -> bool:
        """QuickJS throws ``null`` when an allocation passes the limit and no memory is left for
        an error object, else an "out of memory" error. By the time the run ends the script's
        data is freed (reference counting), so ``null`` is the sign; a script that throws null
        itself is told the same, which is why the message says so."""
        return "out of memory" in text or text.strip() == "null"

    def classify(self, text: str) -> tuple[str, str]:
        if self.host.cancelled():
            return "cancelled", "the caller cancelled the run"
        if text.startswith("InternalError: interrupted"):
            return "code_time_limit", f"the script ran past its {self.limits.seconds:g} s limit"
        if self.out_of_memory(text):
            mib = self.limits.memory_bytes / (1 << 20)
            return (
                "code_memory_limit",
                f"the script used more than its {mib:g} MiB of memory (QuickJS then throws null: a "
                "script that throws null itself reads the same)",
            )
        return "script_error", _first_lines(text)


def _loads(text: str) -> Any:
    """JSON from the engine. ``JSON.stringify`` writes a lone surrogate (half of a UTF-16 pair,
    which a script can make) as an escape that orjson refuses and no UTF-8 text can hold: such
    text is read by the standard library and each lone surrogate becomes U+FFFD."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return _well_formed(json.loads(text))


def _well_formed(value: Any) -> Any:
    if isinstance(value, str):  # a lone surrogate is two bytes of UTF-16: one U+FFFD
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if isinstance(value, list):
        return [_well_formed(v) for v in value]
    if isinstance(value, dict):
        return {_well_formed(k): _well_formed(v) for k, v in value.items()}
    return value


def _first_lines(text: str, lines: int = 6, chars: int = 2000) -> str:
    return "\n".join(text.splitlines()[:lines])[:chars]
