"""LEDGER-06, the outcomes ``test_spend`` does not drive: each one made to happen for real.

Connection refused (a base URL at a closed port), a TLS failure (an ``https://`` base URL at
a plain-HTTP port), malformed bodies from a raw-socket upstream (JSON that is not, a body cut
short of its ``Content-Length``, a chunked body cut before its last chunk, a status line that
is not HTTP), and a client that disconnects mid-call without an idempotency key. The policy
is the documented one (``NEVER_LEFT`` in ``gateway/accounting.py``, docs/api.md "Spend and
accounting"): the fee is charged once the request was sent, whatever came back, and let go
when it never left. After each: exactly one audit row with the outcome and reason, its charge
(or none) 1:1 with it, and every balance equal to the sum of its ledger entries (I-2).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.accounts import (
    MeteredUpstream,
    add_user_keys,
    admin,
    assert_charges_match_audit,
    credits_path,
    install,
    query,
)
from tests.support.clients import connect, modern_tools_call
from tests.support.raw_upstream import RawUpstream
from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    data = tmp_path_factory.mktemp("outcomes") / "data"
    env = {
        "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
        "TOOLSPOKE_IMPORTS_PER_HOUR": "1000",
        "TOOLSPOKE_UPSTREAM_TIMEOUT_S": "5",
    }
    with running_appliance(data, env=env) as running:
        yield running


@pytest.fixture(scope="module")
def key(app: Appliance) -> str:
    """A user's agent with 100 credits: its calls on the platform's toolkits are metered."""
    (made,) = add_user_keys(app.data_dir, "dee", 1, agents=True)
    r = admin(app, "POST", credits_path(app, "dee"), {"amount": 100})
    assert r.status_code == 201, r.text
    return made


@pytest.fixture(scope="module")
def raw() -> Iterator[RawUpstream]:
    upstream = RawUpstream()
    yield upstream
    upstream.close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


def import_spec(app: Appliance, slug: str, spec: dict[str, Any]) -> None:
    r = admin(app, "POST", "/toolkits/openapi", {"slug": slug, "spec": spec})
    assert r.status_code == 201, r.text
    r = admin(app, "PATCH", f"/toolkits/{slug}/access", {"visibility": "published", "default": True})
    assert r.status_code == 200, r.text


def balance(app: Appliance) -> float:
    return float(admin(app, "GET", credits_path(app, "dee")).json()["balance"])


def assert_books_sound(app: Appliance) -> None:
    """I-2 across the whole database: charges and audit rows 1:1, the balance Σ its entries."""
    assert_charges_match_audit(app.data_dir)
    ((entries,),) = query(
        app.data_dir,
        "SELECT coalesce(sum(amount_milli), 0) FROM ledger_entries e JOIN users u ON u.id = e.user_id"
        " WHERE u.name = 'dee'",
    )
    assert balance(app) * 1000 == entries


def rows_of(app: Appliance, slug: str) -> list[tuple[Any, ...]]:
    return query(
        app.data_dir,
        "SELECT a.outcome, a.reason, a.fee_milli, a.tool, (SELECT count(*) FROM ledger_entries e"
        " WHERE e.audit_id = a.id) FROM audit_log a WHERE a.toolkit = ?",
        (slug,),
    )


def run(coro: Any, timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=timeout))


@pytest.mark.parametrize(
    ("where", "op", "outcome", "reason", "charged", "reached"),
    [
        # A refused connection sends nothing: an upstream error, not charged.
        ("closed", "badjson", "upstream_error", "upstream_unavailable", False, False),
        ("tls", "badjson", "blocked", "upstream_tls", False, False),  # the handshake failed: nothing sent
        ("raw", "badjson", "ok", None, True, True),  # passed on as text, as the upstream sent it
        ("raw", "short", "upstream_error", "upstream_invalid", True, True),
        ("raw", "cut", "upstream_error", "upstream_invalid", True, True),
        ("raw", "garbage", "upstream_error", "upstream_invalid", True, True),
    ],
    ids=[
        "connection refused",
        "TLS failure",
        "JSON content type, invalid JSON",
        "body short of its Content-Length",
        "chunked body cut before its last chunk",
        "status line that is not HTTP",
    ],
)
def test_each_failure_outcome_is_charged_only_when_the_request_was_sent_and_leaves_one_audit_row(
    app: Appliance, key: str, raw: RawUpstream, where: str, op: str, outcome: str, reason: str | None,
    charged: bool, reached: bool,
) -> None:  # fmt: skip
    """LEDGER-06: connection refused, TLS failure, malformed bodies; ledger and audit 1:1 (I-2)."""
    port = raw.base_url.rsplit(":", 1)[1]
    base = {"closed": f"http://127.0.0.1:{closed_port()}", "tls": f"https://127.0.0.1:{port}"}.get(where)
    slug = f"raw-{where}-{op}"
    import_spec(app, slug, raw.spec(base))
    before, paths, hellos = balance(app), raw.paths[f"/{op}"], raw.tls_hellos

    async def call() -> Any:
        caller = dataclasses.replace(app, key=key)
        async with connect(caller, mode="legacy") as client:  # 2025-11-25: isError results
            return await client.call_tool(f"{slug}__{op}", {})

    result = run(call())
    assert result.is_error == (outcome != "ok")
    if reason is not None:
        assert result.meta["toolspoke/reason"] == reason
    assert raw.paths[f"/{op}"] - paths == int(reached)
    assert raw.tls_hellos - hellos == int(where == "tls")
    fee = 1000 if charged else 0
    assert rows_of(app, slug) == [(outcome, reason, fee, f"{slug}__{op}", int(charged))]
    assert before - balance(app) == fee / 1000
    assert_books_sound(app)


def test_a_client_that_disconnects_mid_call_without_a_key_is_charged_once_and_audited_interrupted(
    app: Appliance, key: str
) -> None:
    """LEDGER-06: a client disconnect mid-call (no idempotency key): the upstream had the
    request and may have acted, so the fee is charged once; one audit row, `interrupted`."""
    upstream = MeteredUpstream()
    try:
        tool = install(app, "gone", upstream).replace("__hit", "__slow")
        before = balance(app)
        headers, body = modern_tools_call(key, tool, {})
        payload = json.dumps(body).encode()
        host, port = app.base_url.removeprefix("http://").rsplit(":", 1)
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{head}"
                f"Content-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            assert upstream.arrived.wait(30), "the call never reached the upstream"
        # The socket is closed: the appliance notices, cancels the call and queues its row.
        rows: list[tuple[Any, ...]] = []
        for _ in range(200):  # bounded; each round is a real request to the appliance
            rows = rows_of(app, "gone")
            if rows:
                break
            assert httpx.get(app.base_url + "/healthz", timeout=10).status_code == 200
    finally:
        upstream.close()
    assert rows == [("upstream_error", "interrupted", 1000, tool, 1)]
    assert upstream.paths["/slow"] == 1
    assert before - balance(app) == 1
    assert_books_sound(app)
