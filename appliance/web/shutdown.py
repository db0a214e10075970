"""Graceful shutdown (RELIABILITY CRASH-07): stop taking work, let calls in flight finish, then close.

Sanic, on SIGTERM, runs the ``before_server_stop`` listeners while it still accepts
connections, then closes the listener, waits up to ``GRACEFUL_SHUTDOWN_TIMEOUT`` for busy
connections and aborts the rest, then runs ``after_server_stop``. Two things in that order
would lose work: a runtime closed in ``before_server_stop`` pulls the database and the
upstream connections from under calls still running, and a kept-alive client connection
stays busy with new requests for the whole grace period. So, first of all stop listeners:

1. the listening socket stops accepting (shut down: new connections are refused at once);
2. every kept-alive connection closes after the response it is working on (idle ones now);

and the runtime closes in ``after_server_stop`` (``web/app.py``), once the calls in flight
have answered, or been cut off at the end of the grace period (then audited as
``interrupted`` and charged if they reached the upstream, as for a client that went away).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

from sanic import Sanic
from sanic.server.protocols.http_protocol import HttpProtocol

log = logging.getLogger(__name__)


class TrackedProtocol(HttpProtocol):
    """Sanic's HTTP protocol, telling the app where its set of open connections is."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.app.ctx.connections = self.connections


def install(app: Sanic) -> None:
    """Register the first stop listener. Call it last: stop listeners run in reverse order."""

    @app.before_server_stop
    async def stop_taking_work(app: Sanic) -> None:
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
