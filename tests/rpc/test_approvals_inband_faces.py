"""The in-band ask on the other 2025-era channels, in process: the legacy SSE stream (the
official SDK's SSE client over the streaming in-process HTTP client) and stdio
(``web/stdio.StdioFace`` driven line by line on the app's loop, as ``toolspoke stdio`` reads
standard input). The world is ``test_approvals_inband.py``'s.

On each, the ``elicitation/create`` goes on the session's own channel (a ``message`` event,
a line), the client's answer comes back as a message of its own (a POST to ``/messages``, a
line), and the call runs once after a yes; a no runs nothing.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import orjson
import pytest
from mcp import Client
from mcp.client.sse import sse_client

from appliance.access import keys as access_keys
from appliance.gateway import auth
from appliance.web.stdio import StdioFace
from tests.rpc.test_approvals_inband import FEE, Person, Setup, meta_of
from tests.rpc.test_approvals_inband import setup as setup  # the module's world, shared
from tests.support.access_world import api, ok
from tests.support.accounts import run

pytestmark = pytest.mark.inprocess


def test_a_legacy_sse_session_approves_in_band_and_the_call_runs_once(setup: Setup) -> None:
    before, hits, person = setup.balance(), len(setup.hits), Person()

    def factory(headers: Any = None, auth: Any = None, timeout: Any = None) -> httpx.AsyncClient:
        return setup.app.async_client(headers=headers, streaming=True, timeout=httpx.Timeout(30, read=300))

    async def call() -> Any:
        transport = sse_client(
            setup.app.base_url + "/sse",
            headers={"Authorization": f"Bearer {setup.keys['bot']}"},
            httpx_client_factory=factory,  # type: ignore[arg-type]
        )
        async with Client(
            transport, mode="legacy", elicitation_callback=person, read_timeout_seconds=30
        ) as c:
            return await c.call_tool("demo__deleteNote", {"noteId": 81})

    ran = run(call())
    assert not str(meta_of(ran).get("toolspoke/reason", "")).startswith("approval_"), ran
    assert len(person.asked) == 1 and setup.hits[hits:] == ["DELETE /demo/api/notes/81"]
    assert setup.balance() == before - FEE


class Lines:
    """A stdio face's standard output, read line by line as it is written."""

    def __init__(self) -> None:
        self.out = io.BytesIO()
        self.read = 0

    def messages(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.out.getvalue().splitlines()]

    async def next(self, timeout: float = 10) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while len(self.messages()) <= self.read:
                await asyncio.sleep(0.01)
        self.read += 1
        return self.messages()[self.read - 1]


def _line(msg: dict[str, Any]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", **msg})


def stdio_call(
    setup: Setup,
    note: int,
    answer: dict[str, Any] | None,
    *,
    key: str | None = None,
    meanwhile: Callable[[str], Awaitable[None]] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One stdio session that declared elicitation: a call of deleteNote, the ask it gets, the
    client's ``answer`` to it (after ``meanwhile``, given the key's prefix, if any); the ask and
    the call's response."""
    key = key or setup.keys["bot"]

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        principal = await auth.authenticate(setup.app.rt, key, fresh=True)
        lines = Lines()
        face = StdioFace(setup.app.rt, key, principal.key_prefix, lines.out)  # type: ignore[arg-type]
        init = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "t", "version": "1"},
        }
        await face.handle_line(_line({"id": 1, "method": "initialize", "params": init}))
        assert "result" in await lines.next()
        await face.handle_line(_line({"method": "notifications/initialized"}))
        call = {"name": "demo__deleteNote", "arguments": {"noteId": note}}
        await face.handle_line(_line({"id": 2, "method": "tools/call", "params": call}))
        ask = await lines.next()
        assert ask["method"] == "elicitation/create", ask
        if meanwhile is not None:
            await meanwhile(principal.key_prefix)
        await face.handle_line(_line({"id": ask["id"], "result": answer}))
        response = await lines.next()
        await face.drain()
        return ask, response

    return setup.app.run(scenario(), timeout=30)


def test_a_stdio_session_asks_on_its_lines_and_runs_the_call_once_after_a_yes(setup: Setup) -> None:
    before, hits = setup.balance(), len(setup.hits)
    ask, response = stdio_call(setup, 91, {"action": "accept", "content": {"approve": True}})
    assert ask["params"]["mode"] == "form" and '{"noteId":91}' in ask["params"]["message"]
    assert response["id"] == 2 and "approval_" not in str(response["result"].get("_meta")), response
    assert setup.hits[hits:] == ["DELETE /demo/api/notes/91"] and setup.balance() == before - FEE


def test_a_stdio_session_that_declines_runs_nothing(setup: Setup) -> None:
    before, hits = setup.balance(), len(setup.hits)
    _, response = stdio_call(setup, 92, {"action": "decline"})
    result = response["result"]
    assert result["isError"] and result["_meta"]["toolspoke/reason"] == "approval_denied", response
    assert len(setup.hits) == hits and setup.balance() == before


def test_a_yes_given_after_the_stdio_key_was_revoked_runs_nothing(setup: Setup) -> None:
    # A stdio session presents its key once; the person may answer minutes later.
    with api(setup.app) as admin:
        agent = ok(admin.get("/api/v1/agents", params={"user": "pat"}))["agents"][0]["id"]
        key = ok(admin.post("/api/v1/keys", json={"agent_id": agent}), 201)["key"]

    async def revoke(prefix: str) -> None:
        async with setup.app.rt.db.write() as tx:
            await access_keys.revoke(tx, prefix)

    before, hits = setup.balance(), len(setup.hits)
    yes = {"action": "accept", "content": {"approve": True}}
    _, response = stdio_call(setup, 93, yes, key=key, meanwhile=revoke)
    result = response["result"]
    assert result["isError"] and result["_meta"]["toolspoke/reason"] == "unauthorized", response
    assert len(setup.hits) == hits and setup.balance() == before  # nothing sent, nothing charged
