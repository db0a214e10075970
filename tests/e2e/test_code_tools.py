"""Code over tools end to end (issue 24): a real ``toolspoke serve``, the official MCP SDK as
the agent's client, a real HTTP inventory upstream that counts every request.

An agent (not the toolkit's owner, so it pays a fee of 1 credit a call) lists the items and
reads each one, once call by call and once in a ``use_code`` script: the script's answer is a
small fraction of the bytes the calls one by one put in the agent's context, and each of its
inner calls is audited (tied to the run) and charged as the direct call was. Then hostile
scripts: each is contained with its own reason, and the gateway keeps serving.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import httpx
import pytest

from tests.support.accounts import admin, as_key, install, query, run
from tests.support.clients import connect, modern_tools_call
from tests.support.items_upstream import ITEMS, ItemsUpstream
from tests.support.servers import ADMIN_KEY, Appliance, running_appliance

pytestmark = pytest.mark.e2e

MAX_CALLS = 20
TOKEN = "inv-" + secrets.token_urlsafe(24)  # the inventory's bearer token, sealed in the vault
ENV = {
    "TOOLSPOKE_DEMO": "0",
    "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
    "TOOLSPOKE_CODE_TOOLS": "1",
    "TOOLSPOKE_CODE_SECONDS": "3",
    "TOOLSPOKE_CODE_MEMORY_MB": "16",
    "TOOLSPOKE_CODE_MAX_CALLS": str(MAX_CALLS),
}
SUMMARY = """
const { items } = await inv__listItems({});
const full = await Promise.all(items.map((it) => inv__getItem({ id: it.id })));
const low = full.filter((it) => it.stock < 4).map((it) => ({ id: it.id, stock: it.stock }));
console.log("read", full.length, "items");
return { items: full.length, low };
"""


@pytest.fixture(scope="module")
def upstream() -> Iterator[ItemsUpstream]:
    served = ItemsUpstream()
    try:
        yield served
    finally:
        served.close()


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, upstream: ItemsUpstream) -> Iterator[Appliance]:
    with running_appliance(tmp_path_factory.mktemp("code") / "data", env=ENV) as running:
        install(running, "inv", upstream, fee=1)  # type: ignore[arg-type]
        hidden = {"slug": "vault", "spec": upstream.spec()}  # the admin's own: nobody else sees it
        assert admin(running, "POST", "/toolkits/openapi", hidden).status_code == 201
        for method, path, body in (
            ("PUT", "/toolkits/inv/credentials", {"scheme": "bearer", "token": TOKEN}),
            ("PUT", "/toolkits/inv/policy", {"kind": "destructive", "action": "approve"}),
            ("POST", "/users", {"name": "pat"}),
        ):
            assert admin(running, method, path, body).status_code in (200, 201)
        uid = int(query(running.data_dir, "SELECT id FROM users WHERE name = 'pat'")[0][0])
        assert admin(running, "POST", f"/users/{uid}/credits", {"amount": 1000}).status_code == 201
        agent = admin(running, "POST", "/agents", {"name": "bot", "user_id": uid}).json()["id"]
        key = admin(running, "POST", "/keys", {"agent_id": agent}).json()["key"]
        yield as_key(running, key)


def balance(app: Appliance) -> int:
    rows = query(
        app.data_dir,
        "SELECT coalesce(sum(amount_milli), 0) FROM ledger_entries"
        " WHERE user_id = (SELECT id FROM users WHERE name = 'pat')",
    )
    return int(rows[0][0])


def shown(result: Any) -> int:
    """The bytes an answer puts in the agent's context: its text (the structured content is
    the same JSON, and a client hands its model one of the two)."""
    return sum(len(getattr(part, "text", "").encode()) for part in result.content)


async def script(app: Appliance, code: str, tool: str = "use_code") -> Any:
    async with connect(app) as client:
        return await client.call_tool(tool, {"code": code})


def answer_of(result: Any) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(result.content[0].text)
    return value


def rows_of_run(app: Appliance, run_id: str) -> list[sqlite3.Row]:
    with closing(sqlite3.connect(app.data_dir / "toolspoke.db")) as db:
        db.row_factory = sqlite3.Row
        return db.execute("SELECT * FROM audit_log WHERE code_run = ? ORDER BY id", (run_id,)).fetchall()


def test_tools_list_shows_both_code_tools_with_annotations_that_tell_an_approval_prompt_what_they_may_do(
    app: Appliance,
) -> None:
    async def listed() -> dict[str, Any]:
        async with connect(app) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    tools = run(listed())
    assert tools["use_code"].annotations.read_only_hint is True
    assert tools["run_code"].annotations.destructive_hint is True
    assert tools["use_code"].input_schema["required"] == ["code"]


def test_a_script_reads_a_list_and_each_item_for_a_fraction_of_the_bytes_audited_and_charged_as_direct_calls(
    app: Appliance, upstream: ItemsUpstream
) -> None:
    async def one_by_one() -> int:
        async with connect(app) as client:
            listed = await client.call_tool("use_tool", {"tool": "inv__listItems"})
            total = shown(listed)
            for n in range(1, ITEMS + 1):
                got = await client.call_tool("use_tool", {"tool": "inv__getItem", "input": {"id": n}})
                assert not got.is_error, got
                total += shown(got)
            return total

    before = balance(app)
    direct_bytes = run(one_by_one())
    after_direct = balance(app)
    gets = upstream.count("GET", "/items/")
    result = run(script(app, SUMMARY))
    assert not result.is_error, result
    value = answer_of(result)
    assert value["result"]["items"] == ITEMS and value["logs"] == [f"read {ITEMS} items"]
    assert value["calls"] == ITEMS + 1
    assert upstream.count("GET", "/items/") == gets + ITEMS
    code_bytes = shown(result)
    print(f"one by one: {direct_bytes} bytes; one script: {code_bytes} bytes")
    assert code_bytes * 10 < direct_bytes  # a tenth or less of what the calls one by one showed

    # each inner call charged exactly as the direct call was: a credit each, the run itself free
    assert before - after_direct == (ITEMS + 1) * 1000
    assert after_direct - balance(app) == (ITEMS + 1) * 1000
    rows = rows_of_run(app, value["run"])
    inner, own = rows[:-1], rows[-1]
    assert [r["tool"] for r in inner].count("inv__getItem") == ITEMS and len(inner) == ITEMS + 1
    assert {(r["runner"], r["outcome"], r["fee_milli"], r["agent_name"]) for r in inner} == {
        ("use_code", "ok", 1000, "bot")
    }
    assert (own["tool"], own["runner"], own["outcome"], own["fee_milli"]) == ("use_code", "use_code", "ok", 0)
    detail = json.loads(own["detail"])
    assert detail["calls"] == ITEMS + 1 and detail["outcomes"] == {"ok": ITEMS + 1}
    assert len(detail["sha256"]) == 64 and "inv__getItem" not in own["detail"]  # no script text


def test_an_endless_loop_ends_at_its_time_limit_while_the_gateway_answers_others(app: Appliance) -> None:
    async def scenario() -> tuple[Any, bool]:
        looping = asyncio.create_task(script(app, "let n = 0; for (;;) { n++ }"))
        async with connect(app) as client:
            found = await client.call_tool("search_tools", {"query": "list items"})
            assert not found.is_error and "inv__listItems" in found.content[0].text
        answered_first = not looping.done()
        return await looping, answered_first

    result, answered_first = run(scenario())
    assert answered_first  # the search was answered while the script still ran
    assert result.is_error and answer_of(result)["reason"] == "code_time_limit"


@pytest.mark.parametrize(
    ("code", "reason", "said"),
    [
        ("let a = []; for (;;) a.push('x'.repeat(1000) + a.length);", "code_memory_limit", "MiB of memory"),
        ("function f(n) { return f(n + 1) + 1 }; return f(0);", "script_error", "RangeError"),
        ("throw new TypeError('plain failure')", "script_error", "TypeError: plain failure"),
        ("return new Promise(() => {});", "script_stalled", "nothing will settle"),
        ("console.log('y'.repeat(70000));", "code_output_limit", "output passed"),
        ("this is not javascript (", "script_error", "SyntaxError"),
    ],
)
def test_hostile_and_broken_scripts_end_with_their_own_reason(
    app: Appliance, code: str, reason: str, said: str
) -> None:
    result = run(script(app, code))
    value = answer_of(result)
    assert result.is_error and value["reason"] == reason and said in value["error"], value


def test_the_engine_offers_no_way_out_and_a_tampered_prototype_breaks_only_that_run(
    app: Appliance, upstream: ItemsUpstream
) -> None:
    names = [
        "require", "process", "std", "os", "fetch", "XMLHttpRequest", "WebSocket", "setTimeout",
        "setInterval", "Atomics", "SharedArrayBuffer", "performance", "__take", "__deliver", "__start",
        "Deno", "Bun",
    ]  # fmt: skip
    probe = f"return {json.dumps(names)}.filter((n) => typeof globalThis[n] !== 'undefined');"
    assert answer_of(run(script(app, probe)))["result"] == []
    imported = "try { await import('os'); return 'imported' } catch (e) { return String(e) }"
    assert "could not load module" in answer_of(run(script(app, imported)))["result"]
    tamper = """
    JSON.parse = () => 'tampered'; JSON.stringify = () => '"tampered"'; Promise.prototype.then = null;
    Array.prototype.push = null; Map.prototype.set = null; Map.prototype.forEach = null;
    Array.prototype.join = () => 'tampered'; Reflect.apply = null; delete globalThis.tools;
    const got = await inv__getItem({ id: 2 });
    console.log('after', got.id);
    return got.name;
    """
    tampered = answer_of(run(script(app, tamper)))  # the glue kept its own copies of all of those
    assert (tampered["result"], tampered["logs"]) == ("item-2", ["after 2"]), tampered
    # a toJSON on every object, or a setter on every array's first index, changes what the
    # engine's own JSON.stringify does: that script's call fails, with nothing sent
    gets = upstream.count("GET", "/items/")
    for trap, said in (
        ("Object.prototype.toJSON = () => 'x';", "must be an object"),
        ("Object.defineProperty(Array.prototype, '0', { set() { throw new Error('trap') } });", "trap"),
    ):
        own = trap + " try { await inv__getItem({ id: 2 }) } catch (e) { return e.message }"
        assert said in answer_of(run(script(app, own)))["result"]
    assert upstream.count("GET", "/items/") == gets
    fresh = "return [typeof JSON.parse('{}'), Object.prototype.toJSON === undefined, typeof tools];"
    assert answer_of(run(script(app, fresh)))["result"] == ["object", True, "object"]


def test_a_tool_the_caller_may_not_see_reads_as_one_that_does_not_exist(
    app: Appliance, upstream: ItemsUpstream
) -> None:
    probe = """
    const said = [];
    for (const name of ['vault__listItems', 'nothere__listItems']) {
      try { await tools[name]({}); said.push('ran') } catch (e) { said.push([e.reason, e.message]) }
    }
    return said;
    """
    before = upstream.count("GET", "/items")
    hidden, absent = answer_of(run(script(app, probe)))["result"]
    assert hidden[0] == absent[0] == "tool_not_found"
    assert hidden[1].replace("vault__listItems", "X") == absent[1].replace("nothere__listItems", "X")

    async def direct() -> Any:
        async with connect(app) as client:
            return await client.call_tool("use_tool", {"tool": "vault__listItems"})

    assert run(direct()).content[0].text == hidden[1]  # what a direct call of it is told
    assert upstream.count("GET", "/items") == before


def test_use_code_refuses_a_write_and_nothing_reaches_the_upstream(
    app: Appliance, upstream: ItemsUpstream
) -> None:
    write = "await inv__createItem({ body: { name: 'x' } })"
    code = f"try {{ {write}; return 'wrote' }} catch (e) {{ return e.reason }}"
    posts = upstream.count("POST", "/items")
    assert answer_of(run(script(app, code)))["result"] == "wrong_runner"
    assert upstream.count("POST", "/items") == posts
    wrote = answer_of(run(script(app, f"return ({write}).id", "run_code")))
    assert wrote.get("result") == ITEMS + 1, wrote
    assert wrote["result"] == ITEMS + 1 and upstream.count("POST", "/items") == posts + 1


def test_a_destructive_call_waits_for_approval_then_the_same_script_runs_it_once(
    app: Appliance, upstream: ItemsUpstream
) -> None:
    code = "const r = await inv__deleteItem({ id: 3 }); return r.deleted;"

    def call() -> dict[str, Any]:
        headers, body = modern_tools_call(app.key, "run_code", {"code": code})
        got = httpx.post(app.mcp_url, json=body, headers=headers, timeout=30)
        assert got.status_code == 200, got.text
        result: dict[str, Any] = got.json()["result"]
        return result

    waiting = call()
    assert waiting["isError"] and waiting["_meta"]["toolspoke/reason"] == "approval_required", waiting
    assert "The script ended at this call" in waiting["content"][0]["text"]
    assert upstream.count("DELETE", "/items/") == 0
    approval = waiting["_meta"]["toolspoke/approval"]["id"]
    assert admin(as_key(app, ADMIN_KEY), "POST", f"/approvals/{approval}/approve", {}).status_code == 200
    ran = call()
    assert ran["isError"] is False and ran["structuredContent"]["result"] is True, ran
    assert upstream.count("DELETE", "/items/") == 1
    again = call()  # an approval covers one call
    assert again["_meta"]["toolspoke/reason"] == "approval_required"
    assert again["_meta"]["toolspoke/approval"]["id"] != approval
    assert upstream.count("DELETE", "/items/") == 1


def test_more_calls_than_allowed_end_the_run_and_report_what_it_did(
    app: Appliance, upstream: ItemsUpstream
) -> None:
    gets = upstream.count("GET", "/items/")
    code = f"for (let i = 0; i < {MAX_CALLS + 5}; i++) await inv__getItem({{ id: 1 }}); return 'all';"
    before = balance(app)
    result = run(script(app, code))
    value = answer_of(result)
    assert result.is_error and value["reason"] == "code_call_limit"
    assert [c["outcome"] for c in value["calls"]] == ["ok"] * MAX_CALLS
    assert upstream.count("GET", "/items/") == gets + MAX_CALLS
    assert before - balance(app) == MAX_CALLS * 1000


def test_a_script_sees_only_redacted_answers_and_its_own_output_is_redacted_again(app: Appliance) -> None:
    code = """
    const who = (await inv__whoAmI({})).authorization;
    console.log('saw', who);
    return { who, b64: btoa(who) };
    """
    result = run(script(app, code))
    value = answer_of(result)
    text = result.content[0].text
    assert value["result"]["who"] == "Bearer [redacted]" and value["logs"] == ["saw Bearer [redacted]"]
    for form in (TOKEN, base64.b64encode(TOKEN.encode()).decode()):
        assert form not in text and form not in json.dumps(result.structured_content)
    [inner] = [r for r in rows_of_run(app, value["run"]) if r["tool"] == "inv__whoAmI"]
    assert inner["redacted"] >= 1


def test_a_script_sent_again_with_its_idempotency_key_is_answered_from_the_first_run(
    app: Appliance, upstream: ItemsUpstream
) -> None:
    code = "return (await inv__getItem({ id: 4 })).stock;"

    def call() -> dict[str, Any]:
        headers, body = modern_tools_call(app.key, "use_code", {"code": code})
        body["params"]["_meta"]["toolspoke/idempotencyKey"] = "script-once-" + TOKEN[-8:]
        got = httpx.post(app.mcp_url, json=body, headers=headers, timeout=30)
        assert got.status_code == 200, got.text
        result: dict[str, Any] = got.json()["result"]
        return result

    gets, before = upstream.count("GET", "/items/"), balance(app)
    first, again = call(), call()
    assert first["isError"] is False and again["structuredContent"] == first["structuredContent"]
    assert upstream.count("GET", "/items/") == gets + 1 and before - balance(app) == 1000  # ran once


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("return 'a\\u0000b'", "NUL character at 9"),
        ("//" + "x" * 70000, "at most 65536 are accepted"),
        # refused by the JSON parser of every face before anything reads it (-32700)
        ("return '\\ud800'", "body is not valid JSON"),
    ],
)
def test_a_script_the_engine_cannot_take_is_refused_naming_the_field_and_runs_nothing(
    app: Appliance, code: str, said: str
) -> None:
    """Sent as raw JSON text: the escapes reach the server as they are (an SDK cannot even
    encode a lone surrogate); a JSON-RPC -32602 names the field, and the attempt leaves its row
    (outcome invalid) but no run does."""
    headers, body = modern_tools_call(app.key, "use_code", {"code": "CODE"})
    text = json.dumps(body).replace('"CODE"', '"' + code + '"')
    rows = "SELECT code_run, outcome FROM audit_log WHERE tool = 'use_code' ORDER BY id"
    before = query(app.data_dir, rows)
    got = httpx.post(app.mcp_url, content=text, headers={**headers, "Content-Type": "application/json"})
    error = got.json()["error"]
    assert said in error["message"], error
    after = query(app.data_dir, rows)[len(before) :]
    if error["code"] == -32700:
        assert after == []  # not a tool call yet: the body never parsed
    else:
        assert error["code"] == -32602 and error["data"]["field"] == "/code", error
        assert after == [(None, "invalid")]  # the attempt's row, and no run


def test_a_key_revoked_while_its_script_runs_ends_the_run_at_its_next_call(
    app: Appliance, upstream: ItemsUpstream
) -> None:
    agent = query(app.data_dir, "SELECT id FROM agents WHERE name = 'bot'")[0][0]
    made = admin(as_key(app, ADMIN_KEY), "POST", "/keys", {"agent_id": agent}).json()
    # one call, then more than the key check's second of busy work, then the next call
    code = """
    await inv__getItem({ id: 5 });
    const until = Date.now() + 1500; while (Date.now() < until) {}
    await inv__getItem({ id: 6 });
    return 'ran on';
    """
    gets, sixes = upstream.count("GET", "/items/5"), upstream.count("GET", "/items/6")

    async def scenario() -> Any:
        running = asyncio.create_task(script(as_key(app, made["key"]), code))
        while upstream.count("GET", "/items/5") == gets:  # the first call reached the upstream
            assert not running.done(), running.result()
            await asyncio.sleep(0.01)
        revoked = admin(as_key(app, ADMIN_KEY), "DELETE", f"/keys/{made['prefix']}")
        assert revoked.status_code == 200, revoked.text
        return await asyncio.gather(running, return_exceptions=True)

    [ended] = run(scenario())
    assert isinstance(ended, BaseException) and "'reason': 'unauthorized'" in repr(ended), ended
    assert upstream.count("GET", "/items/6") == sixes  # the call after the revocation never left
    own = query(
        app.data_dir, "SELECT outcome, reason FROM audit_log WHERE tool = 'use_code' ORDER BY id DESC LIMIT 1"
    )
    assert own == [("blocked", "unauthorized")], own
