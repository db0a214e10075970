"""A wall-clock interrupt for a QuickJS context: a script's time limit in real seconds.

The binding's own ``set_time_limit`` measures ``clock()``, the process's CPU time: on a
saturated machine a script loops far past its wall time (seen: 7 s of wall for a 1 s limit),
and in a busy gateway other threads' CPU spends the script's budget. QuickJS itself asks an
interrupt handler every few thousand operations whether to stop, and the binding exports
``JS_SetInterruptHandler``; this module installs a handler of ours that answers from
``time.monotonic()`` and the caller's cancellation, so the limit is the wall time the
settings promise and a run whose caller left stops within milliseconds.

The runtime's address is read from the binding's ``Context`` object (its first field after
the object header) and accepted only when ``JS_GetRuntime`` of the next field, the context,
gives the same address back: a binding whose layout differs is detected, and ``install``
returns None (the engine then falls back to the binding's CPU-time limit). The quickjs-ng
version is pinned in ``pyproject.toml`` and ``tests/unit/codemode`` checks the wall limit
under a saturated CPU.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

import quickjs

_HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


@functools.cache
def _library() -> Any:
    try:
        lib = ctypes.CDLL(quickjs._quickjs.__file__)
        lib.JS_GetRuntime.restype = ctypes.c_void_p
        lib.JS_GetRuntime.argtypes = [ctypes.c_void_p]
        lib.JS_SetInterruptHandler.restype = None
        lib.JS_SetInterruptHandler.argtypes = [ctypes.c_void_p, _HANDLER, ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    return lib


def install(ctx: quickjs.Context, stop: Callable[[], bool]) -> object | None:
    """Make ``ctx`` stop whenever ``stop()`` is true (asked every few thousand operations, on
    the engine's thread, with the interpreter lock taken for the call). Returns the handler,
    which must be kept alive as long as the context is; None when this binding's layout is not
    the one known here."""
    lib = _library()
    if lib is None:
        return None
    fields = (ctypes.c_void_p * 4).from_address(id(ctx))  # refcount, type, runtime, context
    runtime, context = fields[2], fields[3]
    if not runtime or not context or lib.JS_GetRuntime(context) != runtime:
        return None

    @_HANDLER
    def handler(_rt: Any, _opaque: Any) -> int:
        return 1 if stop() else 0

    lib.JS_SetInterruptHandler(runtime, handler, None)
    return handler
