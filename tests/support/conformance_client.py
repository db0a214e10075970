"""The gateway as the client under test, for the MCP conformance suite's client mode.

``conformance client --command "python tests/support/conformance_client.py" --scenario S``
starts a scenario server and runs this with its URL as the last argument. This makes a
fresh gateway (data dir in a temporary folder) whose only upstream is that URL, using the
gateway's own CLI as an operator would:

    toolspoke init
    toolspoke import mcp URL --slug up          # the gateway connects and lists the tools
    toolspoke call up__<tool> --input '{...}'   # for every tool it listed

So the gateway's MCP client (``appliance/mcpclient``) is what the harness observes. Exit 0
when every step worked; the harness judges the traffic either way. The ``auth/*``
scenarios go to ``conformance_oauth.py`` instead (the same client, with its OAuth connector).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STEP_TIMEOUT = 25.0
# Arguments for the tools the client scenarios offer; any other tool is called with {}.
ARGUMENTS: dict[str, dict[str, object]] = {"add_numbers": {"a": 3, "b": 4}}


def toolspoke(data_dir: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TOOLSPOKE_DATA_DIR": data_dir,
        # The scenario servers listen on loopback; the egress guard refuses that by default.
        "ALLOWED_TOOL_CIDRS": "127.0.0.1/32",
    }
    done = subprocess.run(
        [sys.executable, "-m", "appliance", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=STEP_TIMEOUT,
        check=False,
    )
    print(f"$ toolspoke {' '.join(args)}  -> exit {done.returncode}", file=sys.stderr)
    sys.stderr.write(done.stderr[-4000:])
    print(done.stdout[-4000:])
    return done


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: conformance_client.py SERVER_URL", file=sys.stderr)
        return 2
    if os.environ.get("MCP_CONFORMANCE_SCENARIO", "").startswith("auth/"):
        # OAuth needs a person's browser, and the connections that keep its tokens per user
        # come later (issue 19): these scenarios drive the upstream client in process.
        sys.path.insert(0, str(REPO))
        from tests.support import conformance_oauth

        return conformance_oauth.main(argv[-1])
    # The harness names its server http://localhost:PORT. The gateway's egress guard refuses
    # localhost *names* whatever ALLOWED_TOOL_CIDRS says (RFC 6761: never trust DNS for them),
    # so the operator writes the loopback literal, which the CIDR setting does allow.
    url = re.sub(r"^(https?://)localhost(?=[:/]|$)", r"\g<1>127.0.0.1", argv[-1])
    with tempfile.TemporaryDirectory(prefix="toolspoke-conformance-") as data_dir:
        if toolspoke(data_dir, "init").returncode != 0:
            return 1
        imported = toolspoke(data_dir, "import", "mcp", url, "--slug", "up", "--json")
        if imported.returncode != 0:
            return 1
        tools = [t["name"] for t in json.loads(imported.stdout).get("tools", [])]
        failed = 0
        for name in tools:
            upstream_name = name.split("__", 1)[1]
            arguments = json.dumps(ARGUMENTS.get(upstream_name, {}))
            failed += toolspoke(data_dir, "call", name, "--input", arguments, "--json").returncode != 0
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
