"""Every pipe descriptor of a spawned child is closed exactly once, on both event loops.

uvloop's pipe transport has libuv close the descriptor and then closes the file object it
was given as well; a second ``close`` of a number that, in between, another thread may have
been given for a file of its own (an SQLite database's). strace counts the failed closes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.loops import LOOPS, LoopFactory

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    import uvloop
    from appliance.children.spawn import spawn

    class Child(asyncio.SubprocessProtocol):
        def __init__(self):
            self.done = asyncio.get_running_loop().create_future()
        def connection_lost(self, exc):
            self.done.set_result(None)

    async def main():
        for _ in range(3):
            child = Child()
            transport = await spawn(
                child, [sys.executable, "-c", "import sys; sys.stdin.read()"],
                env={"PATH": "/usr/bin:/bin"}, cwd=Path.cwd(),
            )
            transport.get_pipe_transport(0).write(b"x")
            transport.close()
            await asyncio.wait_for(child.done, 20)
        print("spawned and closed 3")

    factory = uvloop.new_event_loop if sys.argv[1] == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())
    """
)


@pytest.mark.parametrize("factory", LOOPS)
def test_no_pipe_descriptor_is_closed_twice(factory: LoopFactory, tmp_path: Path) -> None:
    strace = shutil.which("strace")
    assert strace is not None, "strace is missing: `make test` installs it (Debian's strace)"
    name = "uvloop" if "uvloop" in factory.__module__ else "asyncio"
    log = tmp_path / "close.log"
    done = subprocess.run(
        [strace, "-qq", "-f", "-e", "trace=close", "-o", str(log), sys.executable, "-c", SCRIPT, name],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "spawned and closed 3" in done.stdout
    closes = log.read_text().splitlines()
    assert len(closes) > 10  # the trace did see the closes
    assert [line for line in closes if "EBADF" in line] == []
