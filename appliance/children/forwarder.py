"""Run inside a sandbox: offer the gateway's egress proxy on 127.0.0.1, then become the server.

``python3 forwarder.py PORT SOCKET -- COMMAND ARGS...``: binds 127.0.0.1:PORT in the
sandbox's own network namespace (which holds nothing else), forks a process that copies
each connection to the unix socket ``SOCKET`` (the gateway's CONNECT proxy for this
toolkit, ``egress/connect_proxy.py``), and execs the server in its own place, so the server
keeps the pid, the pipes and the limits the sandbox gave it. The copier dies with the
server (parent-death signal, and the sandbox's pid namespace ends with its first process).

Run by the sandbox's Python, not the gateway's: standard library only, no import of the
appliance. It decides nothing; the proxy on the other side of the socket does.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import TYPE_CHECKING

# The server is exec'd after no more than these few imports: the copier imports what it
# needs once forked (asyncio alone costs a start-up tens of milliseconds).
if TYPE_CHECKING:
    import asyncio

_PR_SET_PDEATHSIG = 1
_CHUNK = 65536


async def _copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(_CHUNK):
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()
    except OSError:
        dst.close()


async def _serve(listener: socket.socket, path: str) -> None:
    import asyncio  # once forked (see the imports)

    async def pair(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(path)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
        for w in (writer, up_writer):
            w.close()

    server = await asyncio.start_server(pair, sock=listener)
    await server.serve_forever()


def _copier(listener: socket.socket, path: str) -> None:
    import asyncio  # after the fork (see the imports)
    import contextlib
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    devnull = os.open(os.devnull, os.O_RDWR)
    # Not the server's stdin/stdout (the MCP channel): the gateway sees their EOF when it exits.
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(listener, path))


def main(argv: list[str]) -> None:
    if len(argv) < 5 or argv[3] != "--":
        sys.exit("usage: forwarder.py PORT SOCKET -- COMMAND [ARGS...]")
    port, path, command = int(argv[1]), argv[2], argv[4:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    if os.fork() == 0:
        try:
            _copier(listener, path)
        finally:
            os._exit(0)
    listener.close()
    os.execv(command[0], command)  # noqa: S606 - the server, as the sandbox was asked to run


if __name__ == "__main__":
    main(sys.argv)
