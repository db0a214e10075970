"""Graceful shutdown (RELIABILITY CRASH-07): stop taking work, let calls in flight finish, then close.

Sanic, on SIGTERM, runs the ``before_server_stop`` listeners while it still accepts
connections, then closes the listener, waits up to ``GRACEFUL_SHUTDOWN_TIMEOUT`` for busy
connections and aborts the rest, then runs ``after_server_stop``. Two things in that order
would lose work: a runtime closed in ``before_server_stop`` pulls the database and the
upstream connections from under calls still running, and a kept-alive client connection
stays busy with new requests for the whole grace period. So the shutdown guard, the last
service of the serving order (``gateway/lifecycle.py``) and so the first to stop, does:

1. the listening socket stops accepting (shut down: new connections are refused at once);
2. every kept-alive connection closes after the response it is working on (idle ones now);

and the runtime's parts close in ``after_server_stop``, once the calls in flight have
answered, or been cut off at the end of the grace period (then audited as ``interrupted``
and charged if they reached the upstream, as for a client that went away).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

from sanic import Sanic
from sanic.server.protocols.http_protocol import HttpProtocol

log = logging.getLogger(__name__)


class TrackedProtocol(HttpProtocol):
    """Sanic's HTTP protocol, telling the app where its set of open connections is."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.app.ctx.connections = self.connections


async def stop_taking_work(app: Sanic) -> None:
    """The shutdown guard's stop: the first step of every stop (gateway/lifecycle.py)."""
    app.ctx.stopping = True
    sock: socket.socket | None = getattr(app.ctx, "listen_socket", None)
    if sock is not None:
        stop_listening(asyncio.get_running_loop(), sock)
    connections: set[Any] = getattr(app.ctx, "connections", set())
    busy = 0
    for conn in list(connections):
        http = getattr(conn, "http", None)
        if http is not None:
            http.keep_alive = False  # answer what is in flight, then close
        busy += not conn.close_if_idle()
    log.info("shutting down: no new connections; %d busy connection(s) finishing", busy)


def stop_listening(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Refuse new connections now: the loop stops accepting, the kernel stops listening.

    The socket object stays open (Sanic closes it later through its server); only its
    listening ends, so a connect gets ECONNREFUSED instead of waiting in the backlog.
    """
    with contextlib.suppress(ValueError, OSError):
        loop.remove_reader(sock.fileno())
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


# How often the start-up check looks whether the server loop runs (it runs within a few ms).
_RUNNING_CHECK_S = 0.02
Handler = Callable[[int, FrameType | None], Any]


def keep_early_stop_signals(app: Sanic) -> Callable[[], None]:
    """A SIGTERM or SIGINT that arrives just as the server starts still stops it: call what
    this returns first thing once the server serves (before the ready line is printed).

    Sanic registers its stop handler, runs the ``after_server_start`` listeners in one run of
    the loop and then serves in another. A stop in the first run only ends that run, and
    uvloop does not listen for signals between two runs (a signal that lands then is noted by
    its handler but the loop is never woken for it): either way the server would serve on,
    and a supervisor's SIGTERM right after the ready line waited for its kill. So the stop
    handler is ours: the loop's handler and the Python-level handler both note the signal,
    and the stop happens in the serving run, once (a signal both saw stops it once).
    """
    requested: list[int] = []
    stopped: list[bool] = []

    def stop_when_serving() -> None:
        # ``is_running`` is set between the two runs: true here means the serving run.
        if requested and app.state.is_running and not stopped:
            stopped.append(True)
            app.stop(terminate=False)

    def on_signal(signum: int) -> None:
        requested.append(signum)
        stop_when_serving()

    def noting(previous: Handler) -> Handler:
        def handler(signum: int, frame: FrameType | None) -> None:
            requested.append(signum)
            previous(signum, frame)

        return handler

    def check(loop: asyncio.AbstractEventLoop) -> None:
        if app.state.is_running:
            stop_when_serving()
        else:
            loop.call_later(_RUNNING_CHECK_S, check, loop)

    def take_stop_signals() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, on_signal, sig)  # in place of Sanic's (same stop)
                previous = signal.getsignal(sig)
                if callable(previous):
                    signal.signal(sig, noting(previous))
        loop.call_later(_RUNNING_CHECK_S, check, loop)

    return take_stop_signals
