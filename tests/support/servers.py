"""Real processes and servers for end-to-end tests: the appliance itself and HTTP upstreams.

Every wait is bounded: a server that does not come up within its deadline fails the test
with what it printed, instead of hanging the suite.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import re
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

REPO = Path(__file__).resolve().parents[2]
# What a sandboxed stdio server started by a test reads: this checkout (the npm peers, the
# test servers), the virtualenv whose Python starts them (inside the checkout or not: a git
# worktree shares the main checkout's) and the Python installation it points to.
SANDBOX_READ_PATHS = ",".join(
    dict.fromkeys((str(REPO), str(Path(sys.prefix).resolve()), str(Path(sys.base_prefix).resolve())))
)
FIXTURES = REPO / "tests" / "fixtures" / "openapi"
ADMIN_KEY = "tsk_test-admin-key-0123456789abcdefghijklmnop"
READY = re.compile(r"serving MCP on (http://\S+)/mcp")


@dataclass
class Appliance:
    base_url: str
    key: str
    data_dir: Path
    proc: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)

    @property
    def mcp_url(self) -> str:
        return self.base_url + "/mcp"


# Semantic search is on by default where the bundled model is installed (as it is here), and a
# serving appliance then embeds its whole catalogue in the background: seconds of CPU for the
# large fixture specs, and rankings that turn hybrid part-way through a test. Tests and
# benches start appliances lexical unless they say otherwise (an explicit value, or None for
# the real default: tests/e2e/test_semantic_search.py).
TEST_DEFAULTS = {"TOOLSPOKE_EMBEDDINGS": "none"}


def environment(env: Mapping[str, str | None]) -> dict[str, str]:
    """A child's environment: the tests' defaults, this one's, then ``env`` (None: unset)."""
    full: dict[str, str | None] = {**TEST_DEFAULTS, **os.environ, **env}
    return {k: v for k, v in full.items() if v is not None}


def cli(
    data_dir: Path,
    *args: str,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 60,
    command: list[str] | None = None,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run the toolspoke CLI on ``data_dir``: its exit code, standard output and standard error;
    a variable ``None`` in ``env`` is left unset.

    By default in this process (click's runner): the same command, the same reads and writes of
    the data directory, the same exit code and output, without a Python start and the
    appliance's imports (most of a second each, more on a loaded machine). ``process=True`` (or
    a ``command``, e.g. the binary) runs a new process, bounded by ``timeout``: for what only a
    process shows (the entry point, signals, locks held by a process that dies, standard input)."""
    given = {"TOOLSPOKE_DATA_DIR": str(data_dir), **(env or {})}
    if not process and command is None and not _SERVES.intersection(args[:1]):
        # click's runner sets each variable for the command's time (None: unset), over ours.
        defaults = {k: v for k, v in TEST_DEFAULTS.items() if k not in os.environ}
        return _cli_here(list(args), {**defaults, **given})
    full_env = environment(given)
    cmd = command or [sys.executable, "-m", "appliance"]
    return subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )


# The long-running faces: a process of their own, as a user starts them.
_SERVES = {"serve", "stdio"}
# click's runner swaps the process's standard streams and environment while a command runs:
# one command at a time, whichever thread asks.
_CLI_HERE = threading.Lock()


class _CurrentStderr:
    """Whatever ``sys.stderr`` is when written to: the runner's capture while a command runs."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _cli_here(args: list[str], env: Mapping[str, str | None]) -> subprocess.CompletedProcess[str]:
    from click.testing import CliRunner

    from appliance.cli import main

    # A one-shot command configures no logging, so in a process of its own Python's last-resort
    # handler prints its warnings on standard error; here the test run's handlers would take
    # them. The same handler, for the command's time, keeps them in what the test reads.
    last_resort = logging.StreamHandler(_CurrentStderr())
    last_resort.setLevel(logging.WARNING)
    with _CLI_HERE:
        logging.root.addHandler(last_resort)
        try:
            done = CliRunner().invoke(main, args, env=env, prog_name="toolspoke")
        finally:
            logging.root.removeHandler(last_resort)
    stderr = done.stderr
    code = done.exit_code
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        # What a process would print: the traceback, on standard error, and exit 1.
        stderr += "".join(traceback.format_exception(done.exception))
        code = 1
    return subprocess.CompletedProcess(["toolspoke", *args], code, done.stdout, stderr)


def state_files(data_dir: Path) -> dict[str, str]:
    """Every file of a data directory with its SHA-256; not the lock files, which hold no state
    (``serve.lock`` records the pid of whoever served last)."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(data_dir.iterdir())
        if p.is_file() and p.suffix != ".lock"
    }


def sandbox_reading(*folders: Path) -> dict[str, str]:
    """The environment that lets a sandboxed stdio child also read ``folders`` (a test's own
    tools files; the data directory stays out of its view)."""
    return {"TOOLSPOKE_STDIO_SANDBOX_READ_PATHS": ",".join([SANDBOX_READ_PATHS, *map(str, folders)])}


def import_mcp(app: Appliance, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``toolspoke import mcp --json ARGS`` with loopback upstreams allowed; its report.

    The command runs in this process (click's runner): the same command and the same writes
    to the data directory the serving appliance reads, without a Python start and the
    appliance's imports per toolkit (seconds each on a loaded machine, in the module set-ups
    that import several). The CLI's own tests run it as a process (tests/test_cli.py)."""
    from click.testing import CliRunner

    from appliance.cli import main

    env = {"TOOLSPOKE_DATA_DIR": str(app.data_dir), "ALLOWED_TOOL_CIDRS": "127.0.0.1/32", **(env or {})}
    done = CliRunner().invoke(main, ["import", "mcp", "--json", *args], env=env, catch_exceptions=False)
    assert done.exit_code == 0, done.stderr
    return dict(json.loads(done.stdout))


@contextmanager
def running_appliance(
    data_dir: Path,
    *,
    env: Mapping[str, str | None] | None = None,
    command: list[str] | None = None,
    start_timeout: float = 60,
    port: int = 0,
) -> Iterator[Appliance]:
    """``toolspoke init`` then ``toolspoke serve --port 0``; yields once it prints its address.
    A variable ``None`` in ``env`` is left unset; a ``port`` is for an appliance that must know
    its own address before it starts (``TOOLSPOKE_PUBLIC_URL``)."""
    given = {
        "TOOLSPOKE_DATA_DIR": str(data_dir),
        "TOOLSPOKE_ADMIN_KEY": ADMIN_KEY,
        "ALLOWED_TOOL_CIDRS": "127.0.0.1/32",
        **(env or {}),
    }
    full_env = environment(given)
    cmd = command or [sys.executable, "-m", "appliance"]
    # `init` in this process unless a command (the binary) is given: serve is the process here.
    init = cli(data_dir, "init", env=given, timeout=start_timeout, command=command)
    assert init.returncode == 0, init.stderr
    proc = subprocess.Popen(
        [*cmd, "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
        cwd=REPO,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    output: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    base_url = None
    try:
        while base_url is None:
            try:
                line = lines.get(timeout=start_timeout)
            except queue.Empty:
                raise AssertionError(
                    f"appliance did not start in {start_timeout}s:\n{''.join(output)}"
                ) from None
            if line is None:
                raise AssertionError(f"appliance exited ({proc.wait(5)}):\n{''.join(output)}")
            match = READY.search(line)
            if match:
                base_url = match.group(1)
        yield Appliance(base_url, ADMIN_KEY, data_dir, proc, output)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        reader.join(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


def read_request(handler: BaseHTTPRequestHandler) -> Recorded:
    """Read one request's body and record what it was (headers with lower-case names)."""
    length = int(handler.headers.get("Content-Length") or 0)
    body = handler.rfile.read(length) if length else b""
    parts = urlsplit(handler.path)
    return Recorded(
        handler.command,
        parts.path,
        parse_qs(parts.query),
        {k.lower(): v for k, v in handler.headers.items()},
        body,
    )


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet HTTP/1.1 handler that answers JSON (``_send``)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class PetstoreUpstream:
    """A real HTTP server implementing the OAI petstore (listPets, createPets, showPetById).

    It records every request it receives, so tests can check what the gateway sent.
    """

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.pets: dict[int, dict[str, Any]] = {
            1: {"id": 1, "name": "Rex", "tag": "dog"},
            2: {"id": 2, "name": "Tom", "tag": "cat"},
        }
        outer = self

        class Handler(JsonHandler):
            def _record(self) -> Recorded:
                rec = read_request(self)
                outer.requests.append(rec)
                return rec

            def do_GET(self) -> None:
                rec = self._record()
                if rec.path == "/v1/pets":
                    limit = int(rec.query.get("limit", ["100"])[0])
                    self._send(200, list(outer.pets.values())[:limit])
                elif rec.path.startswith("/v1/pets/"):
                    pet = outer.pets.get(int(rec.path.rsplit("/", 1)[1]) if rec.path[9:].isdigit() else -1)
                    self._send(200, pet) if pet else self._send(404, {"code": 404, "message": "no such pet"})
                else:
                    self._send(404, {"code": 404, "message": "not found"})

            def do_POST(self) -> None:
                rec = self._record()
                if rec.path == "/v1/pets":
                    self.send_response(201)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self._send(404, {"code": 404, "message": "not found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> PetstoreUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
