"""`toolspoke stdio`: the bridge for desktop clients, driven by the official SDK's stdio client."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.support.servers import ADMIN_KEY, REPO, cli

pytestmark = pytest.mark.e2e
BRIDGE = {"search_tools", "list_toolkits", "describe_tools", "use_tool", "run_tool", "run_destructive_tool"}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("stdio") / "data"
    assert cli(data, "init", env={"TOOLSPOKE_ADMIN_KEY": ADMIN_KEY}).returncode == 0
    spec = REPO / "tests" / "fixtures" / "openapi" / "oai-v3.0-petstore.yaml"
    done = cli(
        data,
        "import",
        "openapi",
        str(spec),
        "--slug",
        "petstore",
        "--base-url",
        "https://petstore.example/v1",
    )
    assert done.returncode == 0, done.stderr
    return data


def server(data: Path, key: str) -> StdioServerParameters:
    # The SDK passes the child only a minimal environment plus this: what a desktop config holds.
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "appliance", "stdio"],
        cwd=str(REPO),
        env={"TOOLSPOKE_DATA_DIR": str(data), "TOOLSPOKE_API_KEY": key},
    )


def run_stdio(data: Path, key: str, stdin: str) -> subprocess.CompletedProcess[str]:
    """``toolspoke stdio`` with ``stdin`` written and closed, in a desktop config's minimal
    environment; its exit, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "appliance", "stdio"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
        check=False,
        env={"PATH": "/usr/bin:/bin", "TOOLSPOKE_DATA_DIR": str(data), "TOOLSPOKE_API_KEY": key},
    )


@pytest.mark.parametrize(("mode", "era"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
def test_a_desktop_client_gets_the_bridge_over_stdio_in_both_eras(
    data_dir: Path, mode: str, era: str
) -> None:
    async def scenario() -> tuple[str, set[str], Any]:
        async with Client(server(data_dir, ADMIN_KEY), mode=mode, read_timeout_seconds=30) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            found = await client.call_tool("search_tools", {"query": "list all pets"})
            return client.session.protocol_version, names, found.structured_content

    version, names, found = asyncio.run(asyncio.wait_for(scenario(), timeout=90))
    assert version == era
    assert names >= BRIDGE
    assert found["results"][0]["name"] == "petstore__listPets"


def test_a_bad_key_stops_stdio_at_start_with_a_clear_message(data_dir: Path) -> None:
    done = run_stdio(data_dir, "tsk_not-a-real-key-000000000000000000", "")
    assert done.returncode == 1
    assert "API key" in done.stderr and done.stdout == ""
    missing = subprocess.run(
        [sys.executable, "-m", "appliance", "stdio"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        input="",
        check=False,
        env={"PATH": "/usr/bin:/bin", "TOOLSPOKE_DATA_DIR": str(data_dir)},
    )
    assert missing.returncode == 2 and "TOOLSPOKE_API_KEY" in missing.stderr


def test_requests_pipelined_behind_initialize_wait_for_it_instead_of_being_refused(data_dir: Path) -> None:
    """A client may write initialize, initialized and its first call without waiting for the
    answer (stdio is ordered): every request is answered, none with "send initialize first"."""
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "pipeliner", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "list_toolkits", "arguments": {}},
        },
    ]
    done = run_stdio(data_dir, ADMIN_KEY, "".join(json.dumps(line) + "\n" for line in lines))
    assert done.returncode == 0, done.stderr
    answers = {m["id"]: m for m in map(json.loads, done.stdout.splitlines())}
    assert set(answers) == {1, 2, 3}
    assert answers[1]["result"]["protocolVersion"] == "2025-11-25"
    assert {t["name"] for t in answers[2]["result"]["tools"]} >= BRIDGE
    assert answers[3]["result"]["isError"] is False


def _stdio_process(
    data: Path, key: str, stdin: Any, payload: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "appliance", "stdio"],
        cwd=REPO,
        capture_output=True,
        timeout=120,
        stdin=stdin,
        input=payload,
        check=False,
        env={"PATH": "/usr/bin:/bin", "TOOLSPOKE_DATA_DIR": str(data), "TOOLSPOKE_API_KEY": key},
    )


def _pings_around_a_long_line() -> bytes:
    """ping 1, a 9 MiB line (over twice the 4 MiB limit: the old reader's second overrun
    escaped as a traceback), ping 2."""
    ping = '{{"jsonrpc":"2.0","id":{},"method":"ping"}}\n'
    return ping.format(1).encode() + b"x" * (9 * 1024 * 1024) + b"\n" + ping.format(2).encode()


def _check_answers(done: subprocess.CompletedProcess[bytes]) -> None:
    assert done.returncode == 0, done.stderr[-2000:]
    assert b"Traceback" not in done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a["id"] for a in answers] == [1, None, 2]
    assert answers[1]["error"]["code"] == -32600
    assert "4194304 bytes" in answers[1]["error"]["message"]


def test_a_line_over_the_limit_is_refused_and_the_next_line_is_served(data_dir: Path) -> None:
    _check_answers(_stdio_process(data_dir, ADMIN_KEY, None, _pings_around_a_long_line()))


def test_stdin_may_be_a_regular_file_or_dev_null(data_dir: Path, tmp_path: Path) -> None:
    """`toolspoke stdio < requests.jsonl` under uvloop (the process's loop) aborted with rc 134
    and printed nothing; a file cannot be polled, so it is read in a thread."""
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(_pings_around_a_long_line())
    with requests.open("rb") as stdin:
        _check_answers(_stdio_process(data_dir, ADMIN_KEY, stdin))
    with open("/dev/null", "rb") as stdin:
        done = _stdio_process(data_dir, ADMIN_KEY, stdin)
    assert (done.returncode, done.stdout) == (0, b""), done.stderr[-2000:]
