"""The script engine alone (issue 24): limits, the outbox protocol, what a script may reach.

The ``Host`` here is a real one of its own kind (a thread pool answering from a table), not a
stand-in for the gateway: the engine's contract is the ``Host`` protocol, and the gateway's
side of it is tested end to end in tests/e2e/test_code_tools.py.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
import subprocess
import sys
import threading
import time
from typing import Any

import orjson
import pytest

from appliance.codemode import engine, prelude

LIMITS = engine.Limits(seconds=2.0, memory_bytes=16 << 20, max_calls=10, max_output_bytes=4096)


class TableHost:
    """Answers ``kv__get`` from a table, ``kv__fail`` with a refusal, ``kv__stop`` with an end."""

    def __init__(self, *, hold: int = 0) -> None:
        self.pool = cf.ThreadPoolExecutor(16)
        self.names: list[str] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.flying = 0
        self.most = 0
        self.gate = threading.Barrier(hold) if hold else None
        self.waited = 0.0  # seconds "waiting for a person" (the gateway's in-band asks)

    def cancelled(self) -> bool:
        return self.stop.is_set()

    def paused(self) -> float:
        return self.waited

    def submit(self, name: str, arguments: str) -> cf.Future[engine.Delivery]:
        self.names.append(name)
        args = orjson.loads(arguments)
        with self.lock:
            self.flying += 1
            self.most = max(self.most, self.flying)
        return self.pool.submit(self.answer, name, args)

    def answer(self, name: str, args: dict[str, Any]) -> engine.Delivery:
        try:
            if self.gate is not None:
                self.gate.wait(timeout=5)  # every held call must be in flight at once
            if name == "kv__get":
                return engine.Delivery(
                    True, orjson.dumps({"key": args.get("key"), "n": len(self.names)}).decode()
                )
            if name == "kv__text":
                return engine.Delivery(True, orjson.dumps("x" * args["size"]).decode())
            if name == "kv__stop":
                return engine.Delivery(False, end="stopped")
            return engine.Delivery(
                False, orjson.dumps({"message": f"no {name}", "reason": "tool_not_found"}).decode()
            )
        finally:
            with self.lock:
                self.flying -= 1


def run(source: str, host: TableHost | None = None, **limits: Any) -> engine.Outcome:
    return engine.run(source, dataclasses.replace(LIMITS, **limits), host or TableHost())


def test_a_script_calls_tools_by_exact_name_and_returns_its_value_with_its_log_lines() -> None:
    out = run(
        "const a = await kv__get({ key: 'a' }); const b = await tools['kv__get']({ key: 'b' });"
        "console.log('got', a.key, b.key, { n: 1 }); return [a.key, b.key];"
    )
    assert (out.ok, out.result, out.logs, out.calls) == (True, ["a", "b"], ['got a b {"n":1}'], 2)


def test_calls_awaited_together_are_in_flight_together_up_to_the_limit() -> None:
    host = TableHost(hold=4)
    out = run("return (await Promise.all([1, 2, 3, 4].map((k) => kv__get({ key: k })))).length", host)
    assert (out.result, host.most) == (4, 4)
    host = TableHost()
    out = run(
        "await Promise.all([...Array(9).keys()].map((k) => kv__get({ key: k })))", host, max_in_flight=3
    )
    assert out.ok and host.most <= 3 and out.calls == 9


def test_a_refused_call_rejects_with_the_gateways_reason_which_the_script_may_catch() -> None:
    out = run("try { await kv__nope({}) } catch (e) { return [e.message, e.reason, e instanceof Error] }")
    assert out.result == ["no kv__nope", "tool_not_found", True]
    uncaught = run("await kv__nope({})")
    assert uncaught.reason == "script_error" and "no kv__nope" in (uncaught.error or "")


@pytest.mark.parametrize(
    ("source", "limits", "reason"),
    [
        ("for (;;) {}", {"seconds": 0.3}, "code_time_limit"),
        ("async function f() { for (;;) await null } await f()", {"seconds": 0.3}, "code_time_limit"),
        ("let a = []; for (;;) a.push({ n: a.length })", {}, "code_memory_limit"),
        ("new ArrayBuffer(1 << 30)", {}, "code_memory_limit"),
        ("for (let i = 0; i < 11; i++) kv__get({ key: i })", {}, "code_call_limit"),
        ("console.log('x'.repeat(5000))", {}, "code_output_limit"),
        ("return 'x'.repeat(5000)", {}, "code_output_limit"),
        ("return await kv__text({ size: 2000 })", {"max_result_bytes": 1000}, "code_result_limit"),
        ("await new Promise(() => {})", {}, "script_stalled"),
        ("function f() { return f() + 1 } f()", {}, "script_error"),
        ("not a script (", {}, "script_error"),
    ],
)
def test_every_limit_ends_the_run_with_its_own_reason(
    source: str, limits: dict[str, Any], reason: str
) -> None:
    out = run(source, **limits)
    assert (out.ok, out.reason) == (False, reason), out
    assert out.error


def test_what_the_run_did_before_a_limit_is_counted() -> None:
    out = run("for (let i = 0; i < 20; i++) await kv__get({ key: i })", max_calls=5)
    assert (out.reason, out.calls) == ("code_call_limit", 5)


def test_an_inner_call_may_end_the_run_and_hand_back_why() -> None:
    out = run("await kv__get({}); await kv__stop({}); return 'not reached'")
    assert (out.reason, out.ending, out.calls) == ("call_ended", "stopped", 2)


def test_a_cancelled_caller_ends_the_run_at_its_next_step() -> None:
    host = TableHost()
    host.stop.set()
    assert run("return 1", host).reason == "cancelled"


def test_nothing_outside_the_engine_is_reachable_and_the_glue_is_gone() -> None:
    names = ["require", "process", "std", "os", "fetch", "setTimeout", "setInterval", "Atomics",
             "SharedArrayBuffer", "performance", "__take", "__deliver", "__start", "__names"]  # fmt: skip
    out = run(f"return {orjson.dumps(names).decode()}.filter((n) => typeof globalThis[n] !== 'undefined')")
    assert out.result == []
    imported = run("try { await import('std') } catch (e) { return String(e) }")
    assert "could not load module" in imported.result


def test_the_glue_survives_the_script_replacing_the_builtins_it_uses() -> None:
    out = run(
        "JSON.stringify = JSON.parse = Reflect.apply = Promise.prototype.then = null;"
        "Map.prototype.set = Map.prototype.get = Map.prototype.forEach = Array.prototype.join = null;"
        "const v = await kv__get({ key: 'k' }); console.log('ok'); return v.key"
    )
    assert (out.result, out.logs) == ("k", ["ok"])


def test_a_script_cannot_close_its_wrapper_to_reach_the_glue() -> None:
    out = run("}); globalThis.x = __take; (() => {")
    assert not out.ok


def test_tool_like_identifiers_are_found_once_in_order_but_never_after_a_dot() -> None:
    text = "await gh__list_issues({}); x.obj__prop; gh__list_issues; notion__search_pages(); a__"
    assert prelude.tool_names_in(text) == ["gh__list_issues", "notion__search_pages"]
    many = " ".join(f"k__t{i}" for i in range(prelude.MAX_NAMES + 50))
    assert len(prelude.tool_names_in(many)) == prelude.MAX_NAMES


def test_the_time_limit_is_wall_time_even_when_the_cpu_is_saturated() -> None:
    """QuickJS's own limit counts the process's CPU time: with every core busy elsewhere a
    1 s limit once took 7 s of wall time. The engine's interrupt reads the wall clock."""
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))
    ]
    try:
        started = time.monotonic()
        out = run("for (;;) {}", seconds=0.5)
        took = time.monotonic() - started
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert out.reason == "code_time_limit"
    assert took < 2.0, f"a 0.5 s limit took {took:.1f} s of wall time"


def test_a_cancel_stops_a_loop_inside_its_step() -> None:
    host = TableHost()
    timer = threading.Timer(0.2, host.stop.set)
    timer.start()
    started = time.monotonic()
    out = run("for (;;) {}", host, seconds=30)
    assert out.reason == "cancelled" and time.monotonic() - started < 5


def test_time_spent_waiting_for_a_person_does_not_count_against_the_script() -> None:
    host = TableHost()
    host.waited = 3600.0  # as if a person took an hour to answer an approval asked in band
    started = time.monotonic()
    timer = threading.Timer(1.0, host.stop.set)  # ends the run, should the limit not hold
    timer.start()
    try:
        out = run("for (;;) {}", host, seconds=0.2)
    finally:
        timer.cancel()
    assert out.reason == "cancelled" and time.monotonic() - started >= 0.9  # not stopped at 0.2 s


def test_the_global_object_holds_the_language_console_tools_and_the_named_tools_only() -> None:
    standard = {  # ECMAScript's globals as QuickJS (quickjs-ng) defines them
        "Object", "Function", "Error", "EvalError", "RangeError", "ReferenceError", "SyntaxError",
        "TypeError", "URIError", "InternalError", "AggregateError", "SuppressedError", "Iterator",
        "Array", "parseInt", "parseFloat", "isNaN", "isFinite", "queueMicrotask", "decodeURI",
        "decodeURIComponent", "encodeURI", "encodeURIComponent", "escape", "unescape", "Infinity",
        "NaN", "undefined", "eval", "Number", "Boolean", "String", "Math", "Reflect", "Symbol",
        "DisposableStack", "globalThis", "BigInt", "Date", "RegExp", "JSON", "Proxy", "Map", "Set",
        "WeakMap", "WeakSet", "ArrayBuffer", "Uint8ClampedArray", "Int8Array", "Uint8Array",
        "Int16Array", "Uint16Array", "Int32Array", "Uint32Array", "BigInt64Array", "BigUint64Array",
        "Float16Array", "Float32Array", "Float64Array", "DataView", "Promise", "AsyncDisposableStack",
        "WeakRef", "FinalizationRegistry", "DOMException", "btoa", "atob",
    }  # fmt: skip
    out = run("kv__get; return Object.getOwnPropertyNames(globalThis)")
    assert set(out.result) - standard == {"console", "tools", "kv__get"}


def test_lone_surrogates_a_script_makes_reach_python_as_replacement_characters() -> None:
    out = run("console.log('a\\udc00b'); return { ['k\\ud800']: ['\\ud83d', '\\ud83d\\ude00'] }")
    assert (out.ok, out.logs, out.result) == (True, ["a\ufffdb"], {"k\ufffd": ["\ufffd", "\U0001f600"]})


def test_text_the_engine_cannot_take_ends_the_run_as_a_script_error_not_a_crash() -> None:
    for source in ("return 'a\x00b'", "return '\ud800'"):
        out = run(source)
        assert out.reason == "script_error" and "cannot be run" in (out.error or "")
