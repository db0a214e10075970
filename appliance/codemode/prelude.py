"""What a script's JavaScript world holds before its first line runs (pure).

The engine (``engine.py``) evaluates ``PRELUDE`` in a fresh QuickJS context, then the script
wrapped by ``wrap``. The prelude:

- removes what could block or time: ``Atomics`` and ``SharedArrayBuffer`` (a wait would
  stop the thread where no interrupt reaches it), ``performance`` (a fine clock for timing
  attacks); QuickJS's bare context has no file, network, process, timer or module access to
  remove (no ``std``/``os`` modules, no ``setTimeout``, ``import()`` finds nothing);
- keeps private copies of every built-in its own glue uses (``JSON``, ``Reflect.apply``,
  ``Promise`` and its ``then``, ``Map``'s methods), taken before the script runs, so a
  script that rewrites a prototype breaks only itself;
- never lets the script call into Python: calls, log lines and the script's end are put in
  an outbox that the engine takes after each step (``__take``), and results come back
  through ``__deliver``. Both are read off ``globalThis`` by the engine and deleted before
  the script runs. (The QuickJS binding refuses calls into Python while a time limit is
  set, and a time limit is what stops an endless loop.)

A tool is a function by its exact name: ``tools["<name>"](input)`` for any name, and a global
function for each tool-like identifier the script's text uses (``<toolkit>__<action>``), so
``await github__list_issues({state: "open"})`` reads as it should. Each returns a promise:
the tool's structured content, else its text parsed as JSON, else its text; a failure
rejects with an ``Error`` whose ``reason`` is the gateway's.
"""

from __future__ import annotations

import re

import orjson

# An identifier shaped like a tool's exact name (``catalogue/naming.py``: ``<slug>__<action>``
# where both parts are identifier characters); one linear pass, no nesting.
_TOOL_IDENT = re.compile(r"(?<![A-Za-z0-9_$.])[A-Za-z][A-Za-z0-9_]*__[A-Za-z0-9_]+")
MAX_NAMES = 200  # globals made for one script; any other name stays reachable as tools[name]

PRELUDE = r"""
(() => {
  'use strict';
  const g = globalThis;
  delete g.Atomics; delete g.SharedArrayBuffer; delete g.performance;
  const stringify = JSON.stringify, parse = JSON.parse, apply = Reflect.apply;
  const P = Promise, then = Promise.prototype.then;
  const M = Map, mset = M.prototype.set, mget = M.prototype.get, mdel = M.prototype.delete;
  const each = M.prototype.forEach;
  const E = Error, S = String, freeze = Object.freeze, define = Object.defineProperty;
  // The outbox lives in Maps reached through the captured methods, and __take writes its
  // JSON by hand from strings: no prototype, setter or toJSON of the script's is ever used.
  const waiting = new M();
  let calls = new M(), logs = new M(), done = null, next = 0, lines = 0;
  const text = (v) => {
    if (typeof v === 'string') return v;
    try { const s = stringify(v); return s === undefined ? S(v) : s; } catch (e) { return S(v); }
  };
  const call = (name, input) => {
    if (typeof name !== 'string') throw new E('a tool name is a string');
    let args;
    try { args = input === undefined ? '{}' : stringify(input); } catch (e) {
      throw new E('the input of ' + name + ' is not JSON: ' + S(e && e.message));
    }
    if (typeof args !== 'string' || args[0] !== '{') {
      throw new E('the input of ' + name + ' must be an object');
    }
    const id = ++next;
    apply(mset, calls, [id, [name, args]]);
    return new P((ok, fail) => { apply(mset, waiting, [id, [ok, fail]]); });
  };
  const log = (...parts) => {
    let line = '';
    for (let i = 0; i < parts.length; i++) line += (i ? ' ' : '') + text(parts[i]);
    apply(mset, logs, [++lines, line]);
  };
  const console = freeze({ log, info: log, warn: log, error: log, debug: log });
  define(g, 'console', { value: console, writable: false, configurable: false });
  const tools = new Proxy(freeze({}), {
    get: (t, name) => (typeof name === 'string' ? (input) => call(name, input) : undefined),
  });
  define(g, 'tools', { value: tools, writable: false, configurable: false });
  g.__names = (names) => {
    for (const n of parse(names)) {
      if (!(n in g)) define(g, n, { value: (input) => call(n, input), writable: false, configurable: false });
    }
  };
  g.__deliver = (id, ok, body) => {
    const w = apply(mget, waiting, [id]);
    if (w === undefined) return;
    apply(mdel, waiting, [id]);
    if (ok) { w[0](parse(body)); return; }
    const why = parse(body);
    const err = new E(why.message);
    define(err, 'reason', { value: why.reason, enumerable: true });
    w[1](err);
  };
  const settled = (v) => {
    let s;
    try { s = stringify(v === undefined ? null : v); } catch (e) {
      s = stringify('unserialisable result: ' + S(e && e.message));
    }
    done = [true, s === undefined ? 'null' : s];
  };
  const failed = (e) => {
    let m;
    try {
      m = e instanceof E ? S(e.stack ? e.name + ': ' + e.message + '\n' + e.stack : e.message) : text(e);
    } catch (x) { m = 'the script threw a value that cannot be shown'; }
    done = [false, stringify(typeof m === 'string' ? m : 'the script threw a value that cannot be shown')];
  };
  g.__start = (p) => { apply(then, p, [settled, failed]); };
  // One flat string: the binding cannot hand Python a string QuickJS keeps as a rope (the
  // result of many concatenations), and Array.prototype.join builds a flat one.
  const join = Array.prototype.join;
  g.__take = () => {
    const parts = [];
    let n = 0;
    const own = { writable: true, enumerable: true, configurable: true };
    const put = (x) => { define(parts, n++, { ...own, value: x }); };
    put('{"calls":[');
    apply(each, calls, [(c, id) => {
      put((n > 1 ? ',[' : '[') + id + ',' + stringify(c[0]) + ',' + stringify(c[1]) + ']');
    }]);
    put('],"logs":[');
    const mark = n;
    apply(each, logs, [(line) => { put((n > mark ? ',' : '') + stringify(line)); }]);
    put('],"done":');
    put(done === null ? 'null' : '[' + (done[0] ? 'true' : 'false') + ',' + stringify(done[1]) + ']');
    put('}');
    calls = new M(); logs = new M(); done = null;
    return apply(join, parts, ['']);
  };
})();
"""


def tool_names_in(source: str) -> list[str]:
    """The tool-like identifiers of the script's text, first use first, at most ``MAX_NAMES``."""
    seen: dict[str, None] = {}
    for m in _TOOL_IDENT.finditer(source):
        name = m.group()
        if name not in seen:
            seen[name] = None
            if len(seen) >= MAX_NAMES:
                break
    return list(seen)


def names_json(names: list[str]) -> str:
    return orjson.dumps(names).decode()


def wrap(source: str) -> str:
    """The script as the body of an async function, evaluated to that function (the engine
    calls it): ``await`` works at its top level and its ``return`` value is the run's result.
    A line comment cannot swallow the closing brace; text that closes the function early only
    changes which function the expression is, and no glue is left on ``globalThis`` by then."""
    return "(async () => {\n" + source + "\n})"
