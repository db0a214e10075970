"""Standard input as bounded lines, whatever it is: a pipe, a socket, a terminal, a file, /dev/null.

``toolspoke stdio`` reads one JSON-RPC message per line. Two things made that fragile:

- ``StreamReader.readline`` bounds a line by raising, and what it raises depends on where
  the limit is hit (``ValueError`` from ``readline``, ``LimitOverrunError`` from the
  ``readuntil`` that skipped the rest), so a line over twice the limit escaped as a
  traceback. Here the split is our own: a line over the limit is reported once, the rest
  of it is read and dropped chunk by chunk (memory stays under limit + one chunk), and the
  next line is served as usual.
- ``connect_read_pipe`` wants something the loop can poll. A regular file or ``/dev/null``
  cannot be registered with epoll: the stock loop refuses it with ``ValueError`` and uvloop
  (libuv) aborts the process with no message at all. Such input never blocks, so it is read
  with plain ``os.read`` in a worker thread instead.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncGenerator, AsyncIterator
from typing import BinaryIO

CHUNK = 64 * 1024


class TooLong:
    """Stands for a line over the limit in the stream of lines: it is not kept, only reported."""

    def __init__(self, limit: int) -> None:
        self.limit = limit


def pollable(fd: int) -> bool:
    """Whether the event loop can watch ``fd``: pipes, sockets and terminals, not files or
    ``/dev/null`` (epoll refuses them; under uvloop that is an abort, so never try)."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


async def chunks(stream: BinaryIO) -> AsyncGenerator[bytes, None]:
    """The bytes of ``stream`` as they arrive, until end of file."""
    fd = stream.fileno()
    loop = asyncio.get_running_loop()
    if not pollable(fd):
        while chunk := await loop.run_in_executor(None, os.read, fd, CHUNK):
            yield chunk
        return
    reader = asyncio.StreamReader()  # read(n) only: its own line limit never applies
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stream)
    try:
        while chunk := await reader.read(CHUNK):
            yield chunk
    finally:
        transport.close()


async def lines(source: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes | TooLong]:
    """Each line of ``source`` (without its newline), or ``TooLong`` once for a line of more
    than ``limit`` bytes; a last line without a newline counts too. Linear in the input:
    each chunk is searched once and each kept byte copied once."""
    buffer = bytearray()
    dropping = False  # inside a line already reported as too long
    async for chunk in source:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if dropping:
                dropping = False
            elif len(buffer) + end - start > limit:
                yield TooLong(limit)
            else:
                buffer += chunk[start:end]
                yield bytes(buffer)
            buffer.clear()
            start = end + 1
        if dropping:
            continue
        buffer += chunk[start:]
        if len(buffer) > limit:
            buffer.clear()
            dropping = True
            yield TooLong(limit)  # answered now: the rest may be long in coming
    if buffer and not dropping:
        yield bytes(buffer)
