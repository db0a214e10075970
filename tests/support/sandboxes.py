"""A stdio sandbox for tests and benchmarks that drive ``StdioProcess`` directly (no Runtime).

It is the one the settings would build on this machine, reading what the test servers need:
this checkout and the Python installation (``servers.SANDBOX_READ_PATHS``). None where
bubblewrap does not work here.
"""

from __future__ import annotations

from pathlib import Path

from appliance.children.sandbox import Sandbox, probe
from tests.support.servers import SANDBOX_READ_PATHS


def local_sandbox(data_dir: Path) -> Sandbox | None:
    found = probe()
    if not found.available or found.bwrap is None or found.prlimit is None:
        return None
    return Sandbox(
        bwrap=found.bwrap,
        prlimit=found.prlimit,
        setpriv=found.setpriv or "",
        data_dir=data_dir,
        read_paths=tuple(Path(p) for p in SANDBOX_READ_PATHS.split(",")),
        disable_userns=found.disable_userns,
        python=found.python or "",
    )
