"""`toolspoke stdio`'s input: lines bounded in memory, and any kind of standard input, on both loops."""

from __future__ import annotations

import asyncio
import io
import os
import threading
import tracemalloc
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import pytest

from appliance import config
from appliance.access import keys
from appliance.gateway.runtime import Runtime
from appliance.web import stdio, stdio_lines
from appliance.web.stdio_lines import TooLong
from tests.support.loops import LOOPS, LoopFactory, run_on

KEY = "tsk_stdio-lines-key-0123456789abcdefghijkl"


async def _source(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def split(chunks: Iterable[bytes], limit: int) -> list[bytes | int]:
    """What ``lines`` makes of ``chunks``: the lines, and each TooLong as its limit."""

    async def collect() -> list[bytes | int]:
        found = stdio_lines.lines(_source(chunks), limit)
        return [item.limit if isinstance(item, TooLong) else item async for item in found]

    return asyncio.run(collect())


def test_lines_are_split_wherever_the_chunks_end() -> None:
    data = b'{"a":1}\n\n{"b":2}\r\nlast'
    expected = [b'{"a":1}', b"", b'{"b":2}\r', b"last"]
    for size in (1, 2, 3, 7, len(data)):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        assert split(chunks, 16) == expected, size


def test_a_line_over_the_limit_is_reported_once_and_the_next_lines_are_served() -> None:
    limit = 10
    exact = b"x" * limit
    # the long line ends inside one chunk, spans several, or is the input's unterminated last
    assert split([exact + b"\n" + b"y" * 11 + b"\nok\n"], limit) == [exact, limit, b"ok"]
    assert split([b"y" * 6, b"y" * 6, b"y" * 30, b"yy\nok\n", b"z" * 50], limit) == [limit, b"ok", limit]
    assert split([b"y" * 6, b"y" * 5 + b"\nok"], limit) == [limit, b"ok"]


def test_an_endless_line_is_discarded_in_bounded_memory() -> None:
    """64 MiB without a newline under a 1 MiB limit: reported once, the next line served, and
    never more than the limit and a chunk or two held (the old reader kept twice the limit and
    then escaped with LimitOverrunError)."""
    limit, chunk = 1024 * 1024, b"x" * stdio_lines.CHUNK
    count = 64 * 1024 * 1024 // len(chunk)
    tracemalloc.start()
    try:
        found = split([chunk] * count + [b"\n", b'{"after":1}\n'], limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found == [limit, b'{"after":1}']
    assert peak < limit + 8 * len(chunk), peak


def _requests(*ids: int) -> list[bytes]:
    return [orjson.dumps({"jsonrpc": "2.0", "id": i, "method": "ping"}) for i in ids]


def _answers(out: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in out.splitlines()]


def _serve(tmp_path: Path, factory: LoopFactory, stdin: BinaryIO) -> list[dict[str, Any]]:
    async def main() -> bytes:
        rt = Runtime(config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path / "data")}))
        await rt.open()
        try:
            async with rt.db.write() as tx:
                await keys.add_key(tx, await keys.ensure_admin(tx), KEY, name="test")
            out = io.BytesIO()
            await stdio.serve_stdio(rt, KEY, stdin=stdin, stdout=out)
            return out.getvalue()
        finally:
            await rt.close()

    return _answers(run_on(factory, main(), 60))


def _input() -> bytes:
    first, second = _requests(1, 2)
    return first + b"\n" + b"[" * (stdio.MAX_LINE + 1) + b"\n" + second + b"\n"


def _check(answers: list[dict[str, Any]]) -> None:
    # Requests run concurrently, so answers come in the order they finish: one per line, each
    # ping's by its id, the oversized line's with id null.
    by_id = {a["id"]: a for a in answers}
    assert len(answers) == 3 and set(by_id) == {1, None, 2}, answers
    refused = by_id[None]["error"]
    assert refused["code"] == -32600
    assert str(stdio.MAX_LINE) in refused["message"] and refused["data"]["limit_bytes"] == stdio.MAX_LINE
    assert by_id[1]["result"] == by_id[2]["result"] == {}


@pytest.mark.parametrize("factory", LOOPS)
def test_stdin_may_be_a_regular_file(tmp_path: Path, factory: LoopFactory) -> None:
    """`toolspoke stdio < requests.jsonl`: the stock loop refused a file (ValueError), uvloop
    aborted the process."""
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(_input())
    with requests.open("rb") as stdin:
        _check(_serve(tmp_path, factory, stdin))


@pytest.mark.parametrize("factory", LOOPS)
def test_stdin_may_be_dev_null(tmp_path: Path, factory: LoopFactory) -> None:
    with open(os.devnull, "rb") as stdin:
        assert _serve(tmp_path, factory, stdin) == []


@pytest.mark.parametrize("factory", LOOPS)
def test_a_piped_stdin_survives_an_oversized_line(tmp_path: Path, factory: LoopFactory) -> None:
    data = _input()
    read_end, write_end = os.pipe()

    def feed() -> None:
        with open(write_end, "wb") as pipe:
            pipe.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        with open(read_end, "rb", buffering=0) as stdin:
            _check(_serve(tmp_path, factory, stdin))  # type: ignore[arg-type]
    finally:
        writer.join(timeout=30)
    assert not writer.is_alive()
