"""The demo toolkit works on every face with no configuration (README), and opens nothing else.

Observed: `toolspoke call demo__createNote` and the same over `toolspoke stdio` were refused
unless a `serve` was running with ALLOWED_TOOL_CIDRS set: the demo's base URL was `serve`'s own
loopback address, which only that process had opened in its guard. Here every process runs
with nothing but PATH and the data directory in its environment.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import ADMIN_KEY, FIXTURES, REPO, PetstoreUpstream, running_appliance

pytestmark = pytest.mark.e2e


def toolspoke(data: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """A CLI process whose environment holds no setting but the data directory."""
    env = {"PATH": "/usr/bin:/bin", "TOOLSPOKE_DATA_DIR": str(data)}
    if args[0] == "stdio":
        env["TOOLSPOKE_API_KEY"] = (data.parent / "key").read_text().strip()
    return subprocess.run(
        [sys.executable, "-m", "appliance", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        input=stdin,
        env=env,
        timeout=90,
        check=False,
    )


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    done = toolspoke(data, "init")
    assert done.returncode == 0, done.stderr
    (tmp_path / "key").write_text(done.stdout.strip())
    return data


def _lines(*messages: dict[str, Any]) -> str:
    return "".join(json.dumps(m) + "\n" for m in messages)


def test_a_fresh_data_dir_runs_the_demo_from_call_and_over_stdio_with_no_settings(fresh: Path) -> None:
    made = toolspoke(fresh, "call", "demo__createNote", "--json", "--input", '{"body": {"title": "first"}}')
    assert made.returncode == 0, made.stdout + made.stderr
    assert json.loads(made.stdout)["structuredContent"]["title"] == "first"

    init = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "desktop", "version": "1"},
    }
    create = {"name": "demo__createNote", "arguments": {"body": {"title": "over stdio", "tags": ["t"]}}}
    done = toolspoke(
        fresh,
        "stdio",
        stdin=_lines(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": create},
        ),
    )
    assert done.returncode == 0, done.stderr
    answers = {m["id"]: m for m in map(json.loads, done.stdout.splitlines())}
    result = answers[2]["result"]
    assert result["isError"] is False, result
    assert result["structuredContent"]["title"] == "over stdio"


def test_beside_a_running_serve_the_cli_and_stdio_run_the_demo_with_no_settings(tmp_path: Path) -> None:
    """What a newcomer hit: `serve` (with no ALLOWED_TOOL_CIDRS) had installed the demo at its
    own loopback address, and `toolspoke call` beside it was refused by the egress guard."""
    data = tmp_path / "data"
    (tmp_path / "key").write_text(ADMIN_KEY)
    with running_appliance(data, env={"ALLOWED_TOOL_CIDRS": ""}):
        made = toolspoke(data, "call", "demo__createNote", "--json", "--input", '{"body": {"title": "t"}}')
        assert made.returncode == 0, made.stdout + made.stderr
        assert json.loads(made.stdout)["isError"] is False
        listed = toolspoke(
            data,
            "stdio",
            stdin=_lines(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {
                        "name": "demo__listNotes",
                        "arguments": {},
                        "_meta": {
                            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                            "io.modelcontextprotocol/clientCapabilities": {},
                        },
                    },
                }
            ),
        )
        assert listed.returncode == 0, listed.stderr
        answer = json.loads(listed.stdout.splitlines()[0])
        assert answer["result"]["isError"] is False, answer


def test_a_loopback_upstream_other_than_the_demo_is_still_refused_without_allowed_cidrs(
    fresh: Path,
) -> None:
    with PetstoreUpstream() as petstore:
        spec = FIXTURES / "oai-v3.0-petstore.yaml"
        imported = toolspoke(
            fresh, "import", "openapi", str(spec), "--slug", "local", "--base-url", petstore.base_url
        )
        assert imported.returncode == 1
        assert "127.0.0.1 is loopback; allow it only via ALLOWED_TOOL_CIDRS" in imported.stderr
        listed = toolspoke(fresh, "toolkits", "--json")
        assert listed.returncode == 0 and "demo" in listed.stdout and "local" not in listed.stdout
        assert petstore.requests == []
