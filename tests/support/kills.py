"""SIGKILL a child process at a chosen point of its work, read from outside it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable


def kill_when(
    proc: subprocess.Popen[str], reached: Callable[[], bool], what: str, timeout: float = 120
) -> None:
    """Poll ``reached()`` (bounded by ``timeout``) and SIGKILL ``proc`` the moment it holds;
    fail when the process ends first, since the kill would then prove nothing."""
    try:
        deadline = time.monotonic() + timeout
        while not reached():
            if proc.poll() is not None:
                raise AssertionError(f"{what} ended before the kill: {proc.communicate()}")
            assert time.monotonic() < deadline, f"{what} did not reach the kill point in {timeout:g} s"
        proc.kill()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
    assert proc.returncode == -9, f"{what} ended on its own ({proc.returncode}) before the kill"
