"""What the protocol fuzz talks to: one real ``toolspoke serve`` (restarted if it stops
answering, so one hang cannot end the run), one real ``toolspoke stdio`` process, a legacy
SSE stream, and the valid requests that must keep working between hostile ones.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

import httpx

from tests.support.fuzz import DEADLINE_S, Tally, scan
from tests.support.servers import ADMIN_KEY, REPO, Appliance, running_appliance

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
INIT_PARAMS = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}
RECOVER_S = 20.0  # how long a server that stopped answering gets before it is restarted


def modern_request(method: str, params: dict[str, Any] | None = None, msg_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": {**(params or {}), "_meta": META}}


def routing_headers(doc: Any) -> list[tuple[str, str]]:
    """The 2026-07-28 routing headers a well-behaved client derives from its body."""
    out = [("MCP-Protocol-Version", MODERN)]
    if isinstance(doc, dict) and isinstance(doc.get("method"), str):
        out.append(("Mcp-Method", doc["method"]))
        params = doc.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if isinstance(name, str) and name.isascii() and name.isprintable() and len(name) < 1000:
            out.append(("Mcp-Name", name))
    return out


def tool_ok(doc: Any) -> bool:
    result = doc.get("result") if isinstance(doc, dict) else None
    return isinstance(result, dict) and result.get("isError") is False


class Server:
    """``toolspoke serve`` over one data directory, with a restart for when it hangs."""

    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.env = env
        self._stack = ExitStack()
        self.app: Appliance = self._stack.enter_context(running_appliance(data_dir, env=env))
        self.restarts = 0
        self.closed = False
        self.output: list[str] = []  # what earlier runs printed (a restart starts a new one)

    @property
    def port(self) -> int:
        return int(self.app.base_url.rsplit(":", 1)[1])

    def http(self, timeout: float = DEADLINE_S) -> httpx.Client:
        headers = {"Authorization": f"Bearer {ADMIN_KEY}", "Accept": "application/json, text/event-stream"}
        return httpx.Client(base_url=self.app.base_url, headers=headers, timeout=timeout)

    def healthy(self) -> bool:
        try:
            with self.http(timeout=2) as client:
                return client.get("/healthz").status_code == 200
        except httpx.HTTPError:
            return False

    def valid_call(self) -> str | None:
        """/healthz and a real tools/call (the demo's listNotes through the bridge); None if
        both are served as they should be, else what went wrong."""
        try:
            with self.http() as client:
                health = client.get("/healthz")
                if health.status_code != 200:
                    return f"/healthz answered {health.status_code}"
                doc = modern_request("tools/call", {"name": "use_tool", "arguments": LIST_NOTES})
                r = client.post("/mcp", json=doc, headers=dict(routing_headers(doc)))
                if r.status_code != 200 or not tool_ok(r.json()):
                    return f"tools/call answered {r.status_code} {r.text[:300]}"
        except (httpx.HTTPError, ValueError) as exc:
            return f"valid request failed: {exc!r}"
        return None

    def recover(self, tally: Tally, what: str) -> None:
        """After a timeout: wait (bounded) for the server to answer again, else restart it."""
        deadline = time.monotonic() + RECOVER_S
        while time.monotonic() < deadline:
            if self.healthy():
                return
            time.sleep(0.2)
        tally.fail("hung", f"no answer to /healthz {RECOVER_S:.0f}s after {what}; restarted")
        self.restart()

    def restart(self) -> None:
        self._stack.close()
        self.output += self.app.output
        self._stack = ExitStack()
        self.app = self._stack.enter_context(running_appliance(self.data_dir, env=self.env))
        self.restarts += 1

    def close(self) -> list[str]:
        """Stop the server (once); everything every run of it printed."""
        if not self.closed:
            self._stack.close()
            self.output += self.app.output
            self.closed = True
        return self.output


LIST_NOTES = {"tool": "demo__listNotes", "input": {}}


class StdioProcess:
    """A real ``toolspoke stdio`` over pipes; each line sent is followed by a ping whose answer
    marks where this line's answers end (requests are answered concurrently, by id)."""

    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.env = env
        self.restarts = -1
        self.stderr: list[str] = []
        self._sync = 0
        self._start()

    def _start(self) -> None:
        self.restarts += 1
        env = {
            **os.environ,
            **self.env,
            "TOOLSPOKE_DATA_DIR": str(self.data_dir),
            "TOOLSPOKE_API_KEY": ADMIN_KEY,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "appliance", "stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
            env=env,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        threading.Thread(target=self._pump_out, args=(self.proc, self.lines), daemon=True).start()
        threading.Thread(target=self._pump_err, args=(self.proc,), daemon=True).start()

    @staticmethod
    def _pump_out(proc: subprocess.Popen[bytes], lines: queue.Queue[bytes | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def _pump_err(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.stderr.append(line.decode("utf-8", "replace"))

    def exchange(self, line: bytes, timeout: float = DEADLINE_S) -> tuple[list[bytes], float, str]:
        """Send one line; (the lines answered before the sync ping's answer, seconds, trouble)."""
        self._sync += 1
        sync_id = f"sync-{self._sync}"
        ping = json.dumps({"jsonrpc": "2.0", "id": sync_id, "method": "ping"}).encode()
        start = time.monotonic()
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + b"\n" + ping + b"\n")
            self.proc.stdin.flush()
        except OSError as exc:
            return [], time.monotonic() - start, f"died: write failed ({exc.__class__.__name__})"
        answers: list[bytes] = []
        # Requests run concurrently, so a slow one is answered after the ping: wait for both.
        expect = _request_id(line)
        synced, answered = False, expect is None
        while True:
            remaining = timeout - (time.monotonic() - start)
            try:
                got = self.lines.get(timeout=max(0.01, remaining))
            except queue.Empty:
                return answers, time.monotonic() - start, "slow: no answer to the sync ping"
            if got is None:
                return answers, time.monotonic() - start, "died: stdout closed"
            if sync_id.encode() in got and b'"result"' in got:
                synced = True
            else:
                answers.append(got)
                answered = answered or _answers(got, expect)
            if synced and answered:
                return answers, time.monotonic() - start, ""

    def call(self, doc: dict[str, Any], timeout: float = DEADLINE_S) -> Any:
        """Send a valid request; its answer (requests run concurrently: a slow one is answered
        after a later ping, so wait for its own id), else what went wrong."""
        msg_id = doc.get("id")
        answers, _, trouble = self.exchange(json.dumps(doc).encode(), timeout)
        deadline = time.monotonic() + timeout
        while not trouble:
            for line in answers:
                try:
                    got = json.loads(line)
                except ValueError:
                    continue
                if isinstance(got, dict) and got.get("id") == msg_id:
                    return got
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                return f"no answer to {msg_id} in time"
            if line is None:
                return "died: stdout closed"
            answers = [line]
        return trouble

    def restart(self) -> None:
        self.stop()
        self._start()

    def recover(self, tally: Tally, what: str) -> None:
        """After a timeout: wait (bounded) for a ping's answer, else restart the process."""
        got = self.call({"jsonrpc": "2.0", "id": f"alive-{self._sync}", "method": "ping"}, RECOVER_S)
        if not (isinstance(got, dict) and "result" in got):
            tally.fail("hung", f"no answer to a ping {RECOVER_S:.0f}s after {what}; restarted")
            self.restart()

    def stop(self) -> int | None:
        """Close stdin (the client going away) and wait for the exit; its code."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        rc = self.proc.wait(timeout=5)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        return rc


def _request_id(line: bytes) -> Any:
    """The id a line's answer will carry, when the line is one request (else None)."""
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if isinstance(doc, dict) and isinstance(doc.get("method"), str) and type(doc.get("id")) in (str, int):
        return doc["id"]
    return None


def _answers(line: bytes, msg_id: Any) -> bool:
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return False
    if not isinstance(doc, dict):
        return False
    # A line the server could not read (its JSON is not ours) is answered with a null id.
    return doc.get("id") == msg_id or (doc.get("id") is None and "error" in doc)


class SseStream:
    """One ``GET /sse`` stream read by a thread; its events go to a queue."""

    def __init__(self, server: Server, tally: Tally, paths: tuple[bytes, ...]) -> None:
        self.events: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._client = httpx.Client(
            base_url=server.app.base_url,
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            timeout=httpx.Timeout(DEADLINE_S, read=None),
        )
        self._tally = tally
        self._paths = paths
        self._cm = self._client.stream("GET", "/sse")
        self._resp = self._cm.__enter__()
        threading.Thread(target=self._pump, daemon=True).start()
        first = self.next(DEADLINE_S)
        assert first is not None and first[0] == "endpoint", first
        self.endpoint = first[1]

    def _pump(self) -> None:
        event, data = "message", ""
        try:
            for line in self._resp.iter_lines():
                scan(self._tally, line.encode(), "sse event", self._paths)
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data += line[5:].strip()
                elif not line and data:
                    self.events.put((event, data))
                    event, data = "message", ""
        except (httpx.HTTPError, RuntimeError, ValueError):
            pass
        self.events.put(None)

    def next(self, timeout: float) -> tuple[str, str] | None:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return ("timeout", "")

    def close(self) -> None:
        with suppress(httpx.HTTPError, RuntimeError):
            self._cm.__exit__(None, None, None)
        self._client.close()
