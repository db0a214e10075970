"""The tool-call pipeline stage by stage, in-process on a real runtime and database.

The upstream is an OpenAPI toolkit answered in process (``Egress.serve_locally``, as the demo
API is): a real HTTP-shaped exchange through the gateway's egress with no socket, whose
``/hold`` operation waits until the test lets it go, so a call can be caught mid-dispatch.
Every test reads what the pipeline wrote (audit rows, ledger entries, the book) rather than
what a stage returned alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from appliance import config
from appliance.errors import (
    ApplianceError,
    ArgumentsInvalid,
    IdempotencyConflict,
    InvalidParams,
    QuotaExhausted,
    RateLimited,
    ToolNotFound,
    UpstreamError,
    WrongRunner,
)
from appliance.gateway import accounting, audit, idempotency, ledgering, pipeline, tool_requests
from appliance.gateway.attempt import Attempt
from appliance.gateway.credentials import PreparedCall
from appliance.gateway.imports import import_openapi
from appliance.gateway.runtime import Runtime
from appliance.ledger import store as ledger_store
from appliance.models import OPERATOR, CallResult, Principal
from appliance.secret import Needles
from tests.support.runtimes import plain_user

ORIGIN = "http://gate.toolspoke.invalid"
FEE = 1000  # millicredits: TOOLSPOKE_DEFAULT_FEE=1
SECRET = "s3cr3t-value-for-the-redactor"
SPEC = {
    "openapi": "3.0.3",
    "info": {"title": "gate", "version": "1"},
    "servers": [{"url": ORIGIN}],
    "paths": {
        "/ping": {"get": {"operationId": "ping", "responses": {"200": {"description": "ok"}}}},
        "/hold": {"get": {"operationId": "hold", "responses": {"200": {"description": "ok"}}}},
        "/echo": {
            "get": {
                "operationId": "echo",
                "parameters": [
                    {"name": "text", "in": "query", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {"200": {"description": "ok"}},
            }
        },
    },
}


@dataclass
class Gate:
    """The in-process upstream: counts what reached it; ``/hold`` waits for ``release``."""

    hits: list[str] = field(default_factory=list)
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def answer(self, method: str, target: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        self.hits.append(target)
        if target.startswith("/hold"):
            self.entered.set()
            await self.release.wait()
        return 200, {"content-type": "application/json"}, orjson.dumps({"seen": target})


@dataclass
class World:
    rt: Runtime
    gate: Gate
    payer: Principal  # a plain user who pays the fee
    broke: Principal  # a plain user without credit

    async def rows(self) -> list[dict[str, Any]]:
        await self.rt.book.sync()
        async with self.rt.db.read() as conn:
            found = await conn.all(
                "SELECT tool, toolkit, runner, outcome, reason, fee_milli, owner_call, redacted"
                " FROM audit_log ORDER BY id"
            )
        return [dict(r) for r in found]

    async def balance(self, who: Principal) -> int:
        async with self.rt.db.read() as conn:
            return await conn.batch(lambda r: ledger_store.balance(r, who.user_id))


@contextlib.asynccontextmanager
async def world(**env: str) -> AsyncIterator[World]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = config.load(
            env={"TOOLSPOKE_DATA_DIR": tmp, "TOOLSPOKE_DEMO": "0", "TOOLSPOKE_DEFAULT_FEE": "1", **env}
        )
        rt = Runtime(settings)
        await rt.open()
        try:
            gate = Gate()
            rt.egress.serve_locally(ORIGIN, gate.answer)
            await import_openapi(rt, "gate.json", slug="gate", data=orjson.dumps(SPEC))
            async with rt.db.write() as tx:  # a platform toolkit every user reaches, and pays for
                await tx.one("UPDATE toolkits SET visibility = 'published' WHERE slug = 'gate' RETURNING id")
            payer, broke = await plain_user(rt, "payer"), await plain_user(rt, "broke")
            await rt.book.admin(lambda r: ledger_store.insert_grant(r, 0.0, payer.user_id, 10 * FEE, "t", ""))
            yield World(rt, gate, payer, broke)
        finally:
            await rt.close()


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


def test_a_call_passes_every_stage_into_its_attempt_and_leaves_one_row_and_one_charge() -> None:
    async def scenario() -> None:
        async with world() as w:
            attempt = Attempt(w.payer, "gate__ping", {})
            result = await pipeline.run(w.rt, attempt)
            assert not result.is_error and result is attempt.result
            assert attempt.tool is not None and attempt.tool.name == "gate__ping"  # resolve
            assert attempt.reservation is not None and attempt.reservation.fee == FEE  # reserve
            assert attempt.prepared is not None  # credential
            assert attempt.sent and attempt.upstream_s > 0 and attempt.bytes > 0  # dispatch
            assert (attempt.outcome, attempt.reason, attempt.owner) == ("ok", None, False)
            assert w.gate.hits == ["/ping"]
            assert await w.rows() == [
                {
                    "tool": "gate__ping",
                    "toolkit": "gate",
                    "runner": None,
                    "outcome": "ok",
                    "reason": None,
                    "fee_milli": FEE,
                    "owner_call": 0,
                    "redacted": 0,
                }
            ]
            assert await w.balance(w.payer) == 9 * FEE
            assert w.rt.calls_in_flight == 0

    run(scenario())


@pytest.mark.parametrize(
    ("case", "error", "row"),
    [
        ("unknown name", ToolNotFound, ("gate__pong", None, "invalid", "tool_not_found")),
        ("wrong runner", WrongRunner, ("gate__ping", "gate", "invalid", "wrong_runner")),
        ("bad arguments", ArgumentsInvalid, ("gate__echo", "gate", "invalid", "arguments_invalid")),
        ("no credit", QuotaExhausted, ("gate__ping", "gate", "quota", "quota_exhausted")),
        # The limit comes before the lookup; the row still names the toolkit.
        ("rate limit", RateLimited, ("gate__ping", "gate", "rate_limited", "rate_limited")),
    ],
)
def test_a_refusal_at_any_stage_sends_nothing_charges_nothing_and_leaves_one_row(
    case: str, error: type[ApplianceError], row: tuple[Any, ...]
) -> None:
    async def scenario() -> None:
        async with world(TOOLSPOKE_RATE_LIMIT="1") as w:
            who, name, runner = w.payer, "gate__ping", None
            if case == "unknown name":
                name = "gate__pong"
            elif case == "wrong runner":
                runner = "run_tool"  # a GET is a read tool: use_tool
            elif case == "bad arguments":
                name = "gate__echo"  # its `text` is required
            elif case == "no credit":
                who = w.broke
            else:
                accounting.limit(w.rt, who)  # the one call of this window is spent
            with pytest.raises(error):
                await pipeline.call_tool(w.rt, who, name, {}, runner=runner)
            assert w.gate.hits == []
            rows = await w.rows()
            assert [(r["tool"], r["toolkit"], r["outcome"], r["reason"]) for r in rows] == [row]
            assert rows[0]["fee_milli"] == 0 and rows[0]["runner"] == runner
            assert await w.balance(w.payer) == 10 * FEE and await w.balance(w.broke) == 0
            assert all(t.held_milli == 0 for t in w.rt.book.balances.values())
            assert w.rt.calls_in_flight == 0

    run(scenario())


def test_an_upstream_that_provably_got_nothing_is_an_is_error_result_and_lets_the_fee_go() -> None:
    async def scenario() -> None:
        async with world() as w:
            async with w.rt.db.write() as tx:  # loopback is not an allowed destination
                await tx.one(
                    "UPDATE toolkits SET base_url = 'http://127.0.0.1:9' WHERE slug = 'gate' RETURNING id"
                )
            attempt = Attempt(w.payer, "gate__ping", {})
            result = await pipeline.run(w.rt, attempt)
            assert result.is_error and result.meta["reason"] == "ssrf_blocked"
            assert (attempt.outcome, attempt.sent, attempt.reservation) == ("blocked", False, None)
            assert [(r["outcome"], r["reason"], r["fee_milli"]) for r in await w.rows()] == [
                ("blocked", "ssrf_blocked", 0)
            ]
            assert await w.balance(w.payer) == 10 * FEE

    run(scenario())


def test_upstream_failed_keeps_the_fee_only_when_the_upstream_may_have_acted() -> None:
    async def scenario() -> None:
        async with world() as w:
            for exc, outcome, kept in [
                (UpstreamError("timed out", reason="upstream_timeout"), "upstream_error", True),
                (
                    UpstreamError("refused", reason="upstream_unavailable", sent=False),
                    "upstream_error",
                    False,
                ),
                (UpstreamError("broken", reason="upstream_broken"), "blocked", False),
            ]:
                attempt = Attempt(w.payer, "gate__ping", {})
                tool = await pipeline.resolve(w.rt, attempt)
                await accounting.reserve(w.rt, attempt, tool)
                attempt.sent = True
                accounting.upstream_failed(w.rt, attempt, exc)
                assert attempt.outcome == outcome and (attempt.reservation is not None) == kept, exc.reason
                assert attempt.result is not None and attempt.result.is_error
                assert attempt.result.meta["reason"] == exc.reason
                if attempt.reservation is not None:
                    w.rt.book.release(attempt.reservation)
            assert w.rt.book.balances[w.payer.user_id].held_milli == 0

    run(scenario())


def test_a_call_cut_off_mid_dispatch_is_recorded_interrupted_and_charged() -> None:
    """The upstream may have acted: charged once; the row is queued while unwinding."""

    async def scenario() -> None:
        async with world() as w:
            call = asyncio.create_task(pipeline.call_tool(w.rt, w.payer, "gate__hold", {}))
            await w.gate.entered.wait()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            rows = await w.rows()
            assert [(r["outcome"], r["reason"], r["fee_milli"]) for r in rows] == [
                ("upstream_error", "interrupted", FEE)
            ]
            assert await w.balance(w.payer) == 9 * FEE and w.rt.calls_in_flight == 0

    run(scenario())


def test_a_row_commits_alone_only_when_no_other_attempt_is_in_flight() -> None:
    """The book learns it by argument (``alone``), from the pipeline's own count."""

    async def scenario() -> None:
        async with world() as w:
            seen: list[tuple[str, bool]] = []
            record = w.rt.book.record

            def spy(row: Any, res: Any = None, *, alone: bool = False) -> Any:
                seen.append((row.tool, alone))
                return record(row, res, alone=alone)

            w.rt.book.record = spy  # type: ignore[method-assign]
            held = asyncio.create_task(pipeline.call_tool(w.rt, w.payer, "gate__hold", {}))
            await w.gate.entered.wait()
            await pipeline.call_tool(w.rt, w.payer, "gate__ping", {})  # while hold is in flight
            await audit.refused(w.rt, w.payer, "gate__nope", InvalidParams("no"))
            w.gate.release.set()
            await held
            await pipeline.call_tool(w.rt, w.payer, "gate__ping", {})
            assert seen == [
                ("gate__ping", False),
                ("gate__nope", False),
                ("gate__hold", True),
                ("gate__ping", True),
            ]
            assert w.rt.calls_in_flight == 0 and len(await w.rows()) == 4

    run(scenario())


def test_the_redact_stage_replaces_stored_secrets_and_the_row_counts_them() -> None:
    prepared = PreparedCall(auth=None, authorizer=None, max_bytes=1024, needles=Needles([SECRET]))
    attempt = Attempt(Principal(1, "u", False, "tsk_u"), "kit__t", {}, prepared=prepared)
    attempt.result = CallResult(
        content=[{"type": "text", "text": f"the key is {SECRET}"}], structured={"k": SECRET}
    )
    pipeline.redact(attempt)
    assert attempt.result.content == [{"type": "text", "text": "the key is [redacted]"}]
    assert attempt.result.structured == {"k": "[redacted]"}
    assert attempt.redacted == 2 and attempt.result.meta["redacted"] == 2
    untouched = Attempt(Principal(1, "u", False, "tsk_u"), "kit__t", {})  # no credential stage yet
    untouched.result = CallResult(content=[{"type": "text", "text": SECRET}])
    pipeline.redact(untouched)
    assert untouched.result.content[0]["text"] == SECRET and untouched.redacted == 0


def test_a_refusal_raised_after_the_upstream_spoke_is_scrubbed_and_counted() -> None:
    async def scenario() -> None:
        async with world() as w:
            prepared = PreparedCall(auth=None, authorizer=None, max_bytes=1024, needles=Needles([SECRET]))
            attempt = Attempt(w.payer, "gate__ping", {}, prepared=prepared)
            exc = InvalidParams(f"the upstream said {SECRET}", data={"echo": SECRET})
            await pipeline.refused(w.rt, attempt, exc)
            assert SECRET not in exc.public_message and exc.data == {"echo": "[redacted]"}
            assert [(r["outcome"], r["redacted"]) for r in await w.rows()] == [("invalid", 2)]

    run(scenario())


def test_a_keyed_tools_call_runs_once_replays_after_and_refuses_a_different_call_by_key() -> None:
    async def scenario() -> None:
        async with world() as w:

            def request(name: str, arguments: dict[str, Any]) -> tool_requests.ToolsCall:
                params = {"name": name, "arguments": arguments, "_meta": {idempotency.META_KEY: "k1"}}
                return tool_requests.ToolsCall(w.payer, params)

            first = await tool_requests.serve(w.rt, request("use_tool", {"tool": "gate__ping"}))
            again = await tool_requests.serve(w.rt, request("use_tool", {"tool": "gate__ping"}))
            assert not first.is_error and again.content == first.content
            assert again.meta.get("idempotentReplay") is True
            with pytest.raises(IdempotencyConflict):
                await tool_requests.serve(w.rt, request("use_tool", {"tool": "gate__echo"}))
            with pytest.raises(InvalidParams):
                await tool_requests.serve(
                    w.rt, tool_requests.ToolsCall(w.payer, {"name": "gate__ping", "arguments": 1})
                )
            assert w.gate.hits == ["/ping"]  # one upstream call, one charge
            rows = await w.rows()
            assert [(r["tool"], r["runner"], r["outcome"], r["reason"], r["fee_milli"]) for r in rows] == [
                ("gate__ping", "use_tool", "ok", None, FEE),
                ("gate__ping", "use_tool", "ok", "idempotent_replay", 0),
                ("use_tool", None, "invalid", "idempotency_key_reused", 0),
                ("gate__ping", None, "invalid", "invalid_params", 0),
            ]
            assert await w.balance(w.payer) == 9 * FEE

    run(scenario())


def test_call_history_unnarrowed_shows_a_plain_user_only_their_own_calls() -> None:
    async def scenario() -> None:
        async with world() as w:
            await pipeline.run(w.rt, Attempt(w.payer, "gate__ping", {}))
            with pytest.raises(ApplianceError):  # broke: refused (no credit), still a row of theirs
                await pipeline.run(w.rt, Attempt(w.broke, "gate__ping", {}))
            await w.rt.book.sync()
            mine = await ledgering.calls(w.rt, w.broke)
            assert [c["outcome"] for c in mine["calls"]] == ["quota"]
            everyone = await ledgering.calls(w.rt, OPERATOR)
            assert len(everyone["calls"]) == 2

    run(scenario())
