"""Large results kept aside, in process on a real runtime and database (issue 22, item 4).

The upstream is an OpenAPI toolkit answered in process (``Egress.serve_locally``): ``/big``
answers ``n`` lines of JSON. Small thresholds and bounds (settings) make each rule visible
with a few kilobytes: what is kept and what is answered whole, the owner's oldest evicted,
the appliance's total refusing rather than evicting another's, expiry and its pruning, the
vault's secrets redacted before anything is stored, and reads refused alike to another
caller, after expiry and once the caller no longer sees the tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from appliance import config
from appliance.artifacts import store as artifact_store
from appliance.errors import InvalidParams, NotFound
from appliance.gateway import artifacts, bridge, credentials, pipeline
from appliance.gateway.imports import import_openapi
from appliance.gateway.runtime import Runtime
from appliance.models import OPERATOR, CallResult, Principal
from tests.support.runtimes import plain_user

ORIGIN = "http://big.toolspoke.invalid"
SECRET = "vault-secret-that-an-upstream-echoes"
SPEC = {
    "openapi": "3.0.3",
    "info": {"title": "big", "version": "1"},
    "servers": [{"url": ORIGIN}],
    "components": {"securitySchemes": {"token": {"type": "http", "scheme": "bearer"}}},
    "security": [{"token": []}],
    "paths": {
        "/big": {
            "get": {
                "operationId": "big",
                "parameters": [{"name": "n", "in": "query", "required": True, "schema": {"type": "integer"}}],
                "responses": {"200": {"description": "ok"}},
            }
        }
    },
}
SETTINGS = {
    "TOOLSPOKE_ARTIFACT_THRESHOLD_BYTES": "1000",
    "TOOLSPOKE_ARTIFACT_HEAD_BYTES": "200",
    "TOOLSPOKE_ARTIFACT_OWNER_BYTES": "4000",
    "TOOLSPOKE_ARTIFACT_TOTAL_BYTES": "6000",
}


def lines_of(n: int) -> bytes:
    """``n`` lines of about 20 bytes: a JSON array, one element a line, the secret in line 3."""
    items = [f'"row {i:04d} {SECRET if i == 2 else "pad"}"' for i in range(n)]
    return ("[\n" + ",\n".join(items) + "\n]").encode()


async def answer(method: str, target: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    n = int(target.split("n=", 1)[1])
    return 200, {"content-type": "application/json"}, lines_of(n)


@dataclass
class World:
    rt: Runtime
    ann: Principal
    bob: Principal

    def use(self, who: Principal, n: int) -> Any:
        args = {"tool": "big__big", "input": {"n": n}}
        return bridge.call_bridge(self.rt, who, "use_tool", args)

    async def read(self, who: Principal, handle: Any, **args: Any) -> dict[str, Any]:
        return await artifacts.read_result(self.rt, who, {"handle": handle, **args})

    async def rows(self) -> dict[str, int]:
        async with self.rt.db.read() as conn:
            return await conn.batch(artifact_store.usage_in)


@contextlib.asynccontextmanager
async def world(**env: str) -> AsyncIterator[World]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = config.load(
            env={
                "TOOLSPOKE_DATA_DIR": tmp,
                "TOOLSPOKE_DEMO": "0",
                "TOOLSPOKE_DEFAULT_FEE": "0",
                **SETTINGS,
                **env,
            }
        )
        rt = Runtime(settings)
        await rt.open()
        try:
            rt.egress.serve_locally(ORIGIN, answer)
            await import_openapi(rt, "big.json", slug="big", data=orjson.dumps(SPEC))
            await credentials.set_credential(rt, "big", {"scheme": "bearer", "token": SECRET})
            async with rt.db.write() as tx:  # every user reaches it
                await tx.one("UPDATE toolkits SET visibility = 'published' WHERE slug = 'big' RETURNING id")
            yield World(rt, await plain_user(rt, "ann"), await plain_user(rt, "bob"))
        finally:
            await rt.close()


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


def kept(result: CallResult) -> str:
    assert not result.is_error, result.content
    return str(result.meta["artifact"]["handle"])


def test_a_result_over_the_threshold_is_kept_redacted_and_answered_with_its_head() -> None:
    async def scenario() -> None:
        async with world() as w:
            small = await w.use(w.ann, 10)  # about 300 bytes: answered whole, as before
            assert (
                "artifact" not in small.meta and orjson.loads(small.content[0]["text"])[9] == "row 0009 pad"
            )
            big = await w.use(w.ann, 100)
            handle = kept(big)
            sent = lines_of(100).replace(SECRET.encode(), b"[redacted]")
            head, note = big.content[0]["text"], big.content[1]["text"]
            assert sent.startswith(head.encode()) and len(head) == 200 and big.structured is None
            assert f"{len(sent)} bytes, 102 lines" in note and handle in note
            assert big.meta["artifact"] == {"handle": handle, "bytes": len(sent), "lines": 102, "head": 200}
            async with w.rt.db.read() as conn:
                stored = await conn.batch(lambda r: artifact_store.body_in(r, handle))
            assert stored == sent and SECRET.encode() not in stored  # redacted before it was stored
            whole = await w.read(w.ann, handle, offset=0)
            assert whole["text"].encode() == sent[:1000] and whole["next_offset"] == 1000
            rest = await w.read(w.ann, handle, offset=whole["next_offset"])
            assert rest["text"].encode() == sent[1000:] and rest["end"] is True
            assert (await w.read(w.ann, handle, line=3))["lines"][0] == '"row 0001 pad",'
            found = await w.read(w.ann, handle, match="[redacted]")
            assert found["found"] == [{"line": 4, "text": '"row 0002 [redacted]",'}] and found["end"]
            assert (await w.read(w.ann, handle, path="[99]"))["value"] == "row 0099 pad"

    run(scenario())


def test_only_bridge_calls_keep_results_aside_and_a_zero_threshold_keeps_none() -> None:
    async def scenario() -> None:
        async with world() as w:
            direct = await pipeline.call_tool(w.rt, OPERATOR, "big__big", {"n": 100})  # CLI, /mcp/<slug>
            assert "artifact" not in direct.meta and len(direct.content) == 1
            assert (await w.rows())["results"] == 0
        async with world(TOOLSPOKE_ARTIFACT_THRESHOLD_BYTES="0") as w:
            whole = await w.use(w.ann, 100)
            assert "artifact" not in whole.meta and len(orjson.loads(whole.content[0]["text"])) == 100
            assert (await w.rows())["results"] == 0

    run(scenario())


def test_an_owner_past_its_bound_loses_its_oldest_and_a_full_appliance_keeps_nothing_new() -> None:
    async def scenario() -> None:
        async with world() as w:
            size = len(
                lines_of(100).replace(SECRET.encode(), b"[redacted]")
            )  # about 1.6 kB: two fit in an owner's 4000, three in 6000
            first, second = kept(await w.use(w.ann, 100)), kept(await w.use(w.ann, 100))
            third = kept(await w.use(w.ann, 100))  # ann's oldest makes room
            with pytest.raises(NotFound):
                await w.read(w.ann, first)
            for h in (second, third):
                assert (await w.read(w.ann, h))["bytes"] == size
            bobs = kept(await w.use(w.bob, 100))
            assert (await w.rows()) == {"results": 3, "bytes": 3 * size}
            refused = await w.use(w.bob, 100)  # bob's own room, but not the appliance's
            assert refused.meta["artifact"] == {"kept": False, "reason": "full"}
            assert len(orjson.loads(refused.content[0]["text"])) == 100  # answered whole
            for who, h in ((w.ann, second), (w.ann, third), (w.bob, bobs)):  # nobody else's went
                assert (await w.read(who, h))["handle"] == h
            too_big = await w.use(w.ann, 300)  # over an owner's whole bound
            assert too_big.meta["artifact"] == {"kept": False, "reason": "too_large"}

    run(scenario())


def test_another_caller_an_expired_result_and_a_tool_out_of_sight_all_get_the_same_not_found() -> None:
    async def scenario() -> None:
        async with world() as w:
            handle = kept(await w.use(w.ann, 100))
            agent = Principal(w.ann.user_id, "ann", False, "tsk_a", agent_id=7, agent_name="a")
            for who in (w.bob, agent, OPERATOR):
                with pytest.raises(NotFound) as refused:
                    await w.read(who, handle)
                assert refused.value.field == "handle"
            async with w.rt.db.write() as tx:  # ann no longer sees the toolkit
                await tx.run("UPDATE toolkits SET visibility = 'private' WHERE slug = 'big'")
            with pytest.raises(NotFound):
                await w.read(w.ann, handle)
            async with w.rt.db.write() as tx:
                await tx.run("UPDATE toolkits SET visibility = 'published' WHERE slug = 'big'")
            assert (await w.read(w.ann, handle))["handle"] == handle
            async with w.rt.db.write() as tx:  # its lifetime over
                await tx.run("UPDATE artifacts SET expires_at = 1 WHERE handle = ?", (handle,))
            with pytest.raises(NotFound):
                await w.read(w.ann, handle)
            await artifacts.prune(w.rt)
            assert (await w.rows())["results"] == 0

    run(scenario())


HOSTILE = [
    ({"handle": "res_short"}, "handle"),
    ({"handle": 5}, "handle"),
    ({"offset": 1, "path": "a"}, "path"),
    ({"match": ""}, "match"),
    ({"match": "x" * 201}, "match"),
    ({"match": "two\nlines"}, "match"),
    ({"path": "a..b"}, "path"),
    ({"path": "a[x]"}, "path"),
    ({"path": "a]"}, "path"),
    ({"path": "." * 300}, "path"),
    ({"offset": -1}, "offset"),
    ({"line": 0}, "line"),
    ({"line": True}, "line"),
]


def test_hostile_arguments_are_refused_naming_their_field() -> None:
    async def scenario() -> None:
        async with world() as w:
            handle = kept(await w.use(w.ann, 100))
            for args, field in HOSTILE:
                with pytest.raises(InvalidParams) as refused:
                    await artifacts.read_result(w.rt, w.ann, {"handle": handle, **args})
                assert refused.value.field == field, (args, refused.value)
            bridged = await bridge.call_bridge(
                w.rt, w.ann, "read_result", {"handle": handle, "path": "[500]"}
            )
            assert bridged.is_error and "no index [500]" in bridged.content[0]["text"]

    run(scenario())
