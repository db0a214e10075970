"""Test principals and a metered upstream for the spend and accounting tests.

``add_user_keys`` writes a user, its agents and their API keys straight into the
appliance's database (tens of keys in one transaction, where the admin API would take a
request each). ``MeteredUpstream`` is a real HTTP server on loopback
that counts every request it answers and fails every n-th one with a 500. ``admin``,
``install`` and ``burst`` reach a real appliance or one served in process alike.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import secrets
import sys
import threading
from collections import Counter
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import sqlean
from mcp.shared.exceptions import MCPError

from tests.support.clients import connect
from tests.support.servers import Appliance

if TYPE_CHECKING:
    from tests.support.inprocess import InProcess


def open_db(data_dir: Path, *, read_only: bool = False) -> sqlean.Connection:
    """The appliance's database, opened from the test.

    Why sqlean and not the standard library's sqlite3: an app served in process uses sqlean,
    and two copies of SQLite in one process do not see each other's connections. Closing the
    last sqlite3 connection then looks like closing the last one of all: it checkpoints and
    deletes the WAL under the app, whose later commits go to the unlinked file and are never
    seen again (rows the app acknowledged vanish from every new connection)."""
    path = data_dir / "toolspoke.db"
    if read_only:
        return sqlean.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    return sqlean.connect(str(path), timeout=10)


def api(app: Appliance, key: str | None = None) -> httpx.Client:
    """An admin API client with ``key`` (default: the appliance's admin key)."""
    return httpx.Client(
        base_url=app.base_url, headers={"Authorization": f"Bearer {key or app.key}"}, timeout=30
    )


def ok(r: httpx.Response, status: int = 200) -> Any:
    """The JSON of an answer that must have ``status``."""
    assert r.status_code == status, r.text
    return r.json()


def add_user_keys(data_dir: Path, user: str, keys: int, *, agents: bool = False) -> list[str]:
    """A non-admin user with ``keys`` API keys (``agents``: each for an agent of its own)."""
    made = [f"tsk_{secrets.token_urlsafe(32)}" for _ in range(keys)]
    with closing(open_db(data_dir)) as db, db:
        db.execute("INSERT INTO users (name, is_admin) VALUES (?, 0)", (user,))
        uid = db.execute("SELECT id FROM users WHERE name = ?", (user,)).fetchone()[0]
        for i, key in enumerate(made):
            agent = None
            if agents:
                agent = db.execute(
                    "INSERT INTO agents (user_id, name) VALUES (?, ?) RETURNING id",
                    (uid, f"{user}-agent-{i}"),
                ).fetchone()[0]
            db.execute(
                "INSERT INTO api_keys (user_id, agent_id, name, prefix, secret_hash) VALUES (?, ?, ?, ?, ?)",
                (uid, agent, f"k{i}", key[:12], hashlib.sha256(key.encode()).hexdigest()),
            )
    return made


def add_agent_key(data_dir: Path, user: int, agent: int) -> str:
    """One more key, for an existing agent of ``user``."""
    key = f"tsk_{secrets.token_urlsafe(32)}"
    with closing(open_db(data_dir)) as db, db:
        db.execute(
            "INSERT INTO api_keys (user_id, agent_id, name, prefix, secret_hash) VALUES (?, ?, 'k', ?, ?)",
            (user, agent, key[:12], hashlib.sha256(key.encode()).hexdigest()),
        )
    return key


def user_id(data_dir: Path, name: str) -> int:
    return int(query(data_dir, "SELECT id FROM users WHERE name = ?", (name,))[0][0])


def credits_path(app: Appliance | InProcess, name: str) -> str:
    return f"/users/{user_id(app.data_dir, name)}/credits"


def query(data_dir: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with closing(open_db(data_dir)) as db:
        return list(db.execute(sql, params).fetchall())


def assert_charges_match_audit(data_dir: Path) -> None:
    """I-2: every charge references an audit row whose fee it is; every audit row with a fee
    has exactly one charge."""
    assert query(
        data_dir,
        "SELECT count(*) FROM ledger_entries e LEFT JOIN audit_log a ON a.id = e.audit_id"
        " WHERE e.kind = 'charge' AND (a.id IS NULL OR a.fee_milli != -e.amount_milli)",
    ) == [(0,)]
    assert query(
        data_dir,
        "SELECT count(*) FROM audit_log a WHERE a.fee_milli > 0 AND"
        " (SELECT count(*) FROM ledger_entries e WHERE e.audit_id = a.id AND e.kind = 'charge') != 1",
    ) == [(0,)]


def admin(app: Appliance | InProcess, method: str, path: str, body: Any = None) -> httpx.Response:
    """One admin-API request (``path`` under ``/api/v1``) with the appliance's key."""
    headers = {"Authorization": f"Bearer {app.key}"}
    if isinstance(app, Appliance):
        return httpx.request(method, app.base_url + "/api/v1" + path, json=body, headers=headers, timeout=30)
    return app.request(method, "/api/v1" + path, json=body, headers=headers, timeout=30)


def fund_callers(app: Appliance | InProcess, agents: int) -> dict[str, list[str]]:
    """Three users (ann, bob, cyd) with ``agents // 3`` agents each (a key each), 1000
    credits each."""
    made = {}
    for user in ("ann", "bob", "cyd"):
        made[user] = add_user_keys(app.data_dir, user, agents // 3, agents=True)
        r = admin(app, "POST", credits_path(app, user), {"amount": 1000, "note": "test"})
        assert r.status_code == 201, r.text
    return made


def run(coro: Any, timeout: float = 120) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=timeout))


def as_key(app: Any, key: str) -> Any:
    """``app`` (a real appliance or one in process) as seen with another key."""
    return dataclasses.replace(app, key=key)


async def _calls(app: Appliance | InProcess, key: str, tool: str, n: int) -> list[Any]:
    """``n`` concurrent direct calls on one SDK session; each result or the MCPError raised."""
    async with connect(as_key(app, key)) as client:
        return await asyncio.gather(*(client.call_tool(tool, {}) for _ in range(n)), return_exceptions=True)


def burst(app: Appliance | InProcess, callers: list[tuple[str, int]], tool: str) -> list[Any]:
    """Each ``(key, n)`` of ``callers`` makes ``n`` concurrent calls of ``tool``, all at once."""

    async def scenario() -> list[Any]:
        groups = await asyncio.gather(*(_calls(app, key, tool, n) for key, n in callers))
        return [r for g in groups for r in g]

    return run(scenario())


def quota_errors(results: list[Any]) -> list[MCPError]:
    return [r for r in results if isinstance(r, MCPError) and r.code == -32002]


class MeteredUpstream:
    """``GET /hit``: 200 with the request's number, or 500 for every ``fail_every``-th one.

    Also ``/status/<n>`` (that status), ``/big`` (1 MiB), ``/slow`` (answers only once
    ``release`` is set, or after 20 s), ``/need?q=`` (a required query parameter).
    """

    def __init__(self, fail_every: int = 0, port: int = 0) -> None:
        self.count = 0
        self.failed = 0
        self.paths: Counter[str] = Counter()
        self.authorizations: Counter[str] = Counter()  # Authorization headers seen
        self.release = threading.Event()
        self.arrived = threading.Event()  # set when a /slow request is being held
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes; on a kept-alive connection Nagle would hold
            # the body for the client's delayed ACK (~40 ms a request).
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                with outer.lock:
                    outer.count += 1
                    outer.paths[path] += 1
                    outer.authorizations[self.headers.get("Authorization", "")] += 1
                    n = outer.count
                    fail = bool(fail_every) and n % fail_every == 0
                    outer.failed += fail
                status = 500 if fail else 200
                body = json.dumps({"n": n}).encode()
                if path.startswith("/status/"):
                    status = int(path.rsplit("/", 1)[1])
                elif path == "/big":
                    body = b"x" * (1024 * 1024)
                elif path == "/slow":
                    outer.arrived.set()
                    outer.release.wait(20)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 512  # hundreds of calls connect at once

            def handle_error(self, request: Any, client_address: Any) -> None:
                # A caller that gave up (a timeout test) closed its end: expected, not news.
                if not isinstance(sys.exc_info()[1], BrokenPipeError | ConnectionResetError):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def spec(self) -> dict[str, Any]:
        return {
            "openapi": "3.0.3",
            "info": {"title": "meter", "version": "1"},
            "servers": [{"url": self.base_url}],
            "paths": {
                "/hit": {"get": {"operationId": "hit", "responses": {"200": {"description": "counted"}}}},
                "/status/500": {
                    "get": {"operationId": "fail", "responses": {"500": {"description": "down"}}}
                },
                "/status/404": {
                    "get": {"operationId": "missing", "responses": {"404": {"description": "no"}}}
                },
                "/big": {"get": {"operationId": "big", "responses": {"200": {"description": "1 MiB"}}}},
                "/slow": {"get": {"operationId": "slow", "responses": {"200": {"description": "late"}}}},
                "/need": {
                    "get": {
                        "operationId": "need",
                        "parameters": [
                            {"name": "q", "in": "query", "required": True, "schema": {"type": "string"}}
                        ],
                        "responses": {"200": {"description": "ok"}},
                    }
                },
            },
        }

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def install(app: Appliance | InProcess, slug: str, upstream: MeteredUpstream, **quota: Any) -> str:
    """Import the metered upstream as toolkit ``slug`` (published) and set its quota; its tool's name."""
    r = admin(app, "POST", "/toolkits/openapi", {"slug": slug, "spec": upstream.spec()})
    assert r.status_code == 201, r.text
    # Other users' keys may see and call it once it is published, their agents once it is a
    # platform default (or granted).
    r = admin(app, "PATCH", f"/toolkits/{slug}/access", {"visibility": "published", "default": True})
    assert r.status_code == 200, r.text
    if quota:
        r = admin(app, "PUT", f"/toolkits/{slug}/quota", quota)
        assert r.status_code == 200, r.text
    return f"{slug}__hit"
