"""Calls with an idempotency key, for the idempotency tests on an app in process
(tests/rpc/test_idempotency.py) and on a real serve (tests/e2e/test_idempotency.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from tests.support.accounts import MeteredUpstream, add_user_keys, admin, credits_path, install, query
from tests.support.servers import Appliance

if TYPE_CHECKING:
    from tests.support.inprocess import InProcess

KEY = "toolspoke/idempotencyKey"
REPLAY = "toolspoke/idempotentReplay"
ENV = {
    "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
    "TOOLSPOKE_IMPORTS_PER_HOUR": "1000",
    "TOOLSPOKE_UPSTREAM_TIMEOUT_S": "20",
}


def two_agents(app: Appliance | InProcess, upstream: MeteredUpstream) -> tuple[str, str]:
    """Two agents of one user with 100 credits; the toolkit ``idem`` costs 1 a call."""
    a, b = add_user_keys(app.data_dir, "ivy", 2, agents=True)
    assert admin(app, "POST", credits_path(app, "ivy"), {"amount": 100}).status_code == 201
    install(app, "idem", upstream, fee=1)
    return a, b


async def keyed(client: Any, tool: str, key: str, arguments: dict[str, Any] | None = None) -> Any:
    """An SDK client's call of ``tool`` under idempotency key ``key``."""
    return await client.call_tool(tool, arguments or {}, meta={KEY: key})


def text(result: Any) -> str:
    return "".join(part.text for part in result.content)


def charges(app: Appliance | InProcess, slug: str = "idem") -> int:
    """How many charges the ledger holds for toolkit ``slug``."""
    ((n,),) = query(
        app.data_dir,
        "SELECT count(*) FROM ledger_entries e JOIN toolkits k ON k.id = e.toolkit_id"
        " WHERE k.slug = ? AND e.kind = 'charge'",
        (slug,),
    )
    return int(n)


def raw_call(
    app: Appliance | InProcess, key: str, path: str, params: Any, timeout: float = 30
) -> dict[str, Any]:
    """One tools/call with whatever params (the SDK would refuse bad ones) on a 2025-11-25
    session: its envelope has no routing headers that would refuse a bad name first."""
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    if isinstance(app, Appliance):
        http = httpx.Client(base_url=app.base_url, headers=headers, timeout=30)
    else:
        http = app.client(headers=headers, timeout=30)
    with http:
        client = {"name": "raw", "version": "1"}
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
        r = http.post(path, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
        assert r.status_code == 200, r.text
        session = {"Mcp-Session-Id": r.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        r = http.post(path, json=body, headers=session, timeout=timeout)
    doc: dict[str, Any] = r.json()
    return doc
