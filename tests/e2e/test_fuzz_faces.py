"""A seeded protocol fuzz of every face against one real ``serve`` and one real ``stdio``.

Faces: ``/mcp`` in both eras (2026-07-28 stateless, 2025-11-25 with a session), ``/mcp/<slug>``,
the legacy SSE transport (``GET /sse`` + ``POST /messages``), the admin API ``/api/v1`` (every
operation of its OpenAPI document) and ``toolspoke stdio``. Hostile messages are mutations of
valid templates (malformed JSON, wrong types, huge values, deep nesting, batches,
notifications posing as requests, bad and duplicate headers, truncated and oversized bodies),
sent as raw bytes so that duplicate headers and lying lengths reach the server as written.

Every answer must come in time, with no 5xx, no traceback and no internal path; refusals must
be the face's error document; a refused Origin or Host must never be served; and a valid
request (``/healthz`` and a real tools/call) must still be served after every ``PROBE_EVERY``
hostile ones. Failures are collected and reported together, per face and category, with the
per-face counts in the terminal summary. ``TOOLSPOKE_FUZZ_SEED`` and
``TOOLSPOKE_FUZZ_MESSAGES`` change the seed and the number of messages per face.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.support import fuzz
from tests.support.fuzz import CATEGORIES, DEADLINE_S, Mutator, Tally, dumps
from tests.support.fuzz_cases import MAX_BODY, Case, Run, is_api_error, is_rpc_error, mutate_headers
from tests.support.fuzz_targets import (
    INIT_PARAMS,
    LEGACY,
    LIST_NOTES,
    Server,
    SseStream,
    StdioProcess,
    modern_request,
    routing_headers,
    tool_ok,
)

pytestmark = pytest.mark.e2e
SEED = int(os.environ.get("TOOLSPOKE_FUZZ_SEED", "20261201"))
PER_FACE = int(os.environ.get("TOOLSPOKE_FUZZ_MESSAGES", "270"))
PROBE_EVERY = 200
MIB = 1024 * 1024
ENV = {
    "TOOLSPOKE_MAX_REQUEST_BYTES": str(MAX_BODY),
    # The fuzz is one key sending thousands of messages: rate limits are not under test here.
    "TOOLSPOKE_RATE_LIMIT": "1000000",
    "TOOLSPOKE_BROWSE_RATE_LIMIT": "1000000",
}
MODERN_TEMPLATES = [
    modern_request("server/discover"),
    modern_request("tools/list"),
    modern_request("ping"),
    modern_request("tools/call", {"name": "search_tools", "arguments": {"query": "write a note"}}),
    modern_request("tools/call", {"name": "use_tool", "arguments": LIST_NOTES}),
    modern_request(
        "tools/call",
        {"name": "run_tool", "arguments": {"tool": "demo__createNote", "input": {"body": {"title": "f"}}}},
    ),
    modern_request("tools/call", {"name": "describe_tools", "arguments": {"tools": ["demo__getNote"]}}),
]
LEGACY_TEMPLATES = [
    {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": INIT_PARAMS},
    {"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {}},
    {"jsonrpc": "2.0", "id": 9, "method": "ping"},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3, "reason": "x"}},
    {"jsonrpc": "2.0", "id": 10, "method": "logging/setLevel", "params": {"level": "info"}},
    {
        "jsonrpc": "2.0",
        "id": 11,
        "method": "tools/call",
        "params": {"name": "use_tool", "arguments": LIST_NOTES},
    },
    {
        "jsonrpc": "2.0",
        "id": "s",
        "method": "tools/call",
        "params": {"name": "search_tools", "arguments": {"query": "n"}},
    },
]
SLUG_TEMPLATES = [
    modern_request("tools/call", {"name": "listNotes", "arguments": {"limit": 2}}),
    modern_request(
        "tools/call", {"name": "createNote", "arguments": {"body": {"title": "t", "tags": ["a"]}}}
    ),
    modern_request("tools/call", {"name": "getNote", "arguments": {"noteId": 1}}),
    modern_request("tools/list"),
    {"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "listNotes", "arguments": {}}},
    {"jsonrpc": "2.0", "id": 13, "method": "tools/list", "params": {}},
]
NOTIFICATION_TAG = "sent-as-no-request"
HOSTILE_SEGMENTS = [
    "nope",
    "x" * 300,
    "%00",
    "..%2F..",
    "9" * 30,
    "-1",
    "0",
    "%E2%80%AE",
    "%ff",
    "a%20b",
    "1e5",
]


def run_mcp(run: Run, n: int, path: str, templates: list[dict[str, Any]], session: Callable[[], str]) -> None:
    """/mcp or /mcp/<slug>: modern templates with their routing headers, legacy ones with the
    session (``session()`` opens a new one when the last was dropped)."""
    first = templates[0]
    if "_meta" in (first.get("params") or {}):
        run.sweep_guards("POST", path, first, run.base(routing_headers(first)))
    else:
        run.sweep_guards("POST", path, first, run.base([("MCP-Protocol-Version", LEGACY)]))
    for i in range(n):
        category = CATEGORIES[i % len(CATEGORIES)]
        template = run.rng.choice(templates)
        if category == "notification" and run.rng.random() < 0.5:
            template = marked_note(template, direct=path != "/mcp")
        modern = "_meta" in (template.get("params") or {})
        fixed = routing_headers(template)

        def headers(
            doc: Any, modern: bool = modern, fixed: list[tuple[str, str]] = fixed
        ) -> list[tuple[str, str]]:
            if modern:
                return run.base(routing_headers(doc) if run.rng.random() < 0.5 else fixed)
            extra = [("MCP-Protocol-Version", LEGACY)]
            if not (isinstance(doc, dict) and doc.get("method") == "initialize"):
                extra.append(("Mcp-Session-Id", session()))
            return run.base(extra)

        run.send(run.case(category, "POST", path, template, headers), is_rpc_error)
        if (i + 1) % PROBE_EVERY == 0:
            run.probe()
    run.probe()


def marked_note(template: dict[str, Any], *, direct: bool) -> dict[str, Any]:
    """A createNote tagged ``NOTIFICATION_TAG`` in the template's era: sent only as a
    notification (or another message that is no request), it must never run."""
    note = {"body": {"title": "n", "tags": [NOTIFICATION_TAG]}}
    name, arguments = (
        ("createNote", note) if direct else ("run_tool", {"tool": "demo__createNote", "input": note})
    )
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if "_meta" in (template.get("params") or {}):
        return modern_request("tools/call", params)
    return {"jsonrpc": "2.0", "id": 14, "method": "tools/call", "params": params}


def notifications_ran(tally: Tally, server: Server) -> None:
    """Any note tagged by a message that was no request means a notification was executed."""
    with server.http() as client:
        notes = client.get("/demo/api/notes", params={"tag": NOTIFICATION_TAG, "limit": 100}).json()
    for note in notes:
        tally.fail("notification_ran", f"a tools/call that was no request created note {note}")
    if notes:
        with server.http() as client:
            for note in notes:
                client.delete(f"/demo/api/notes/{note['id']}")


def legacy_session(server: Server, path: str) -> Callable[[], str]:
    state: dict[str, Any] = {}

    def current() -> str:
        if state.get("port") != server.port or not alive(state["id"]):
            with server.http() as client:
                r = client.post(
                    path, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT_PARAMS}
                )
                state.update(id=r.headers["mcp-session-id"], port=server.port, checked=0)
        return str(state["id"])

    def alive(session_id: str) -> bool:
        state["checked"] = state.get("checked", 0) + 1
        if state["checked"] % 25:
            return True
        with server.http() as client:
            r = client.post(
                path,
                json={"jsonrpc": "2.0", "id": 2, "method": "ping"},
                headers={"Mcp-Session-Id": session_id},
            )
            return r.status_code == 200

    return current


def run_sse(run: Run, n: int) -> Tally:
    """``POST /messages`` with hostile bodies and headers (their answers travel on the stream,
    read up to a sync ping's), and hostile ``GET /sse`` requests."""
    rng, server, tally = run.rng, run.server, run.tally
    state = {"stream": open_sse(run), "port": server.port, "sync": 0}

    def stream() -> SseStream:
        if state["port"] != server.port:
            state["stream"].close()
            state.update(stream=open_sse(run), port=server.port)
        current: SseStream = state["stream"]
        return current

    def until(msg_id: str, what: str) -> Any:
        """The stream's events up to the answer to ``msg_id`` (each checked); that answer."""
        while True:
            event = stream().next(DEADLINE_S)
            if event is None or event[0] == "timeout":
                tally.fail("stream_lost" if event is None else "slow", f"after {what}: no answer to {msg_id}")
                state["stream"].close()
                state["stream"] = open_sse(run)
                return None
            fuzz.internal(tally, event[1].encode(), f"after {what}")
            try:
                doc = json.loads(event[1])
            except ValueError:
                doc = None
            if not isinstance(doc, dict) or doc.get("jsonrpc") != "2.0":
                tally.fail("not_jsonrpc", f"after {what}: event {event[1][:200]!r}")
            elif doc.get("id") == msg_id:
                return doc

    client = server.http()

    def post(doc: dict[str, Any]) -> None:
        client.post(server.app.base_url + stream().endpoint, json=doc)

    def sync(what: str) -> None:
        state["sync"] += 1
        msg_id = f"sync-{state['sync']}"
        post({"jsonrpc": "2.0", "id": msg_id, "method": "ping"})
        until(msg_id, what)

    def probe_sse() -> str | None:
        msg_id = f"probe-{state['sync']}"
        post(
            {
                "jsonrpc": "2.0",
                "id": msg_id,
                "method": "tools/call",
                "params": {"name": "use_tool", "arguments": LIST_NOTES},
            }
        )
        got = until(msg_id, "a valid tools/call")
        return None if tool_ok(got) else f"tools/call over SSE answered {got!r}"[:300]

    run.sweep_guards("POST", stream().endpoint, LEGACY_TEMPLATES[0], run.base())
    run.sweep_guards("GET", "/sse", None, run.base(), head_only=True)
    for i in range(n):
        category = CATEGORIES[i % len(CATEGORIES)]
        template = rng.choice(LEGACY_TEMPLATES)
        if category == "notification" and rng.random() < 0.5:
            template = marked_note(template, direct=False)
        if category == "headers" and rng.random() < 0.35:
            hdrs, what, guarded, framing = mutate_headers(rng, run.base(), server.port)
            data = fuzz.request_bytes("GET", rng.choice(("/sse", "/sse/demo", "/sse/nope")), hdrs)
            run.send(
                Case(data, f"GET /sse {what}", guarded=guarded, framing_ok=framing, head_only=True),
                is_rpc_error,
            )
            continue
        path = stream().endpoint
        if rng.random() < 0.1:
            path = rng.choice(
                (
                    "/messages",
                    "/messages?session_id=",
                    f"{path}&session_id=x",
                    "/messages?session_id=" + "A" * 4000,
                )
            )
        ans = run.send(run.case(category, "POST", path, template, lambda _doc: run.base()), is_rpc_error)
        if ans.status == 202:
            sync(f"{category} {template.get('method')}")
        if (i + 1) % PROBE_EVERY == 0:
            run.probe(probe_sse)
    run.probe(probe_sse)
    state["stream"].close()
    client.close()
    return tally


def open_sse(run: Run) -> SseStream:
    stream = SseStream(run.server, run.tally, run.paths)
    with run.server.http() as client:
        client.post(
            stream.endpoint,
            json={"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": INIT_PARAMS},
        )
        client.post(stream.endpoint, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return stream


def sample(schema: Any, components: dict[str, Any], depth: int = 0) -> Any:
    """A plausible value for a JSON Schema (the admin API's own documents)."""
    if not isinstance(schema, dict) or depth > 4:
        return "fuzz"
    if "$ref" in schema:
        return sample(components.get(schema["$ref"].rsplit("/", 1)[1]), components, depth + 1)
    for key in ("oneOf", "anyOf", "allOf"):
        if schema.get(key):
            return sample(schema[key][0], components, depth + 1)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), "string") if isinstance(kind, list) else kind
    if kind == "object" or "properties" in schema:
        return {k: sample(v, components, depth + 1) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [sample(schema.get("items"), components, depth + 1)]
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return True
    return "fuzz-value"


def api_operations(server: Server) -> list[tuple[str, str, Any, list[str], bool]]:
    """(method, path template, sample body or None, query names, public) per documented operation."""
    with server.http() as client:
        doc = client.get("/api/v1/openapi.json").json()
    components = doc.get("components", {}).get("schemas", {})
    prefix = "/api/v1" if not next(iter(doc["paths"])).startswith("/api/v1") else ""
    ops = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            schema = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            body = sample(schema, components) if schema is not None else None
            queries = [p["name"] for p in op.get("parameters", []) if p.get("in") == "query"]
            ops.append((method.upper(), prefix + path, body, queries, op.get("security") == []))
    return ops


def fill_path(rng: random.Random, method: str, template: str) -> str:
    """Path parameters: for reads, real-looking ones; for writes, only values that name nothing
    (a fuzz that deleted the demo toolkit or revoked its own key would test nothing after)."""
    out = []
    for segment in template.split("/"):
        if segment.startswith("{"):
            real = {"{slug}": "demo", "{name}": "demo__listNotes"}.get(segment, "1")
            segment = real if method == "GET" and rng.random() < 0.5 else rng.choice(HOSTILE_SEGMENTS)
        out.append(segment)
    return "/".join(out)


def run_api(run: Run, n: int) -> Tally:
    rng, server = run.rng, run.server
    ops = api_operations(server)
    hostile_values = ["-1", "0", "abc", "1e999", "%00", quote("\u202e"), "9" * 40, "x" * 5000, "[]", "true"]
    run.sweep_guards("GET", "/api/v1/toolkits", None, run.base())
    for i in range(n):
        method, template, body, queries, public = rng.choice(ops)
        path = fill_path(rng, method, template)
        category = CATEGORIES[i % len(CATEGORIES)]
        if body is None and category in ("wrong_type", "huge") and queries:
            name = rng.choice(queries)
            value = (
                rng.choice(hostile_values) if category == "wrong_type" else "A" * rng.choice((5000, 60000))
            )
            path += f"?{name}={value}" + (f"&{name}=2" if rng.random() < 0.3 else "")
        case = run.case(category, method, path, body if body is not None else {}, lambda _doc: run.base())
        if public:
            case.guarded = False  # the document itself is public on purpose
        run.send(case, is_api_error)
        if (i + 1) % PROBE_EVERY == 0:
            run.probe(lambda: me_ok(server))
    run.probe(lambda: me_ok(server))
    return run.tally


def me_ok(server: Server) -> str | None:
    with server.http() as client:
        r = client.get("/api/v1/me")
    return (
        None
        if r.status_code == 200 and "user" in r.text
        else f"GET /api/v1/me answered {r.status_code} {r.text[:200]}"
    )


def run_stdio(server: Server, tally: Tally, rng: random.Random, paths: tuple[bytes, ...], n: int) -> Tally:
    """Hostile lines to a real ``toolspoke stdio``: every answer a JSON-RPC line, in time, no
    traceback; the process alive and serving; one oversized line of each size."""
    proc = StdioProcess(server.data_dir, {**ENV, "ALLOWED_TOOL_CIDRS": "127.0.0.1/32"})
    mut = Mutator(rng)
    categories = [c for c in CATEGORIES if c not in ("headers", "truncated")]
    templates = MODERN_TEMPLATES + LEGACY_TEMPLATES
    oversized = iter((9 * MIB, 5 * MIB))  # past MAX_LINE (4 MiB) and past twice it; then 300 KB
    asked: dict[Any, str] = {}  # id -> what was sent with it: late answers name their request
    for i in range(n):
        category = categories[i % len(categories)]
        template = rng.choice(templates)
        if category == "notification" and rng.random() < 0.5:
            template = marked_note(template, direct=False)
        template = {**template, "id": f"m{i}"} if "id" in template else template
        if category == "oversized":
            size = next(oversized, 300 * 1024)
            line, what = dumps({**template, "pad": "p" * size}), f"a {size}-byte line"
        else:
            line, what = mut.body(category, template)
            what = f"{category} {what}"
        asked[f"m{i}"] = what
        answers, elapsed, trouble = proc.exchange(line)
        tally.sent += 1
        if trouble.startswith("died"):
            tally.fail(
                "died", f"{what}: {trouble}; rc {proc.proc.poll()}; stderr {''.join(proc.stderr)[-300:]!r}"
            )
            proc.restart()
        elif trouble or elapsed > DEADLINE_S:
            tally.fail("slow", f"{what}: {elapsed:.1f}s {trouble}")
            if trouble:
                proc.recover(tally, what)
        for answer in answers:
            try:
                doc = json.loads(answer)
            except ValueError:
                doc = None
            ok = isinstance(doc, dict) and doc.get("jsonrpc") == "2.0"
            msg_id = doc.get("id") if ok and isinstance(doc, dict) else None
            source = asked.get(msg_id, what) if type(msg_id) is str else what
            fuzz.scan(tally, answer, source, paths)
            fuzz.internal(tally, answer, source)
            if not ok:
                tally.fail("not_jsonrpc", f"{what}: {answer[:200]!r}")
        if (i + 1) % PROBE_EVERY == 0 or i == n - 1:
            doc = modern_request(
                "tools/call", {"name": "use_tool", "arguments": LIST_NOTES}, msg_id=f"probe-{i}"
            )
            got = proc.call(doc)
            if not tool_ok(got):
                tally.fail("valid_failed", f"tools/call over stdio answered {got!r}"[:400])
    # The client goes away mid-line: the process ends cleanly, without a traceback.
    assert proc.proc.stdin is not None
    proc.proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"meth')
    rc = proc.stop()
    if rc != 0:
        tally.fail("died", f"stdin closed mid-line: rc {rc}")
    fuzz.scan(tally, "".join(proc.stderr).encode(), "stdio's stderr", paths)
    return tally


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, tuple[bytes, ...]]]:
    data = tmp_path_factory.mktemp("fuzz") / "data"
    server = Server(data, ENV)
    try:
        yield server, fuzz.internal_paths(data.parent)
    finally:
        server.close()


@pytest.fixture(scope="module")
def rng() -> random.Random:
    """One seeded stream for the module: the faces, run in order, draw what they drew as one test."""
    return random.Random(SEED)


MCP_FACES = {
    "mcp 2026-07-28": ("/mcp", MODERN_TEMPLATES),
    "mcp 2025-11-25": ("/mcp", LEGACY_TEMPLATES),
    "mcp/<slug>": ("/mcp/demo", SLUG_TEMPLATES),
}
FACES = [*MCP_FACES, "sse", "api/v1", "stdio"]


# Longer than the suite's 30 s: a hang found must not cut off the report (each is bounded,
# RECOVER_S in tests/support/fuzz_targets.py, then the server restarted); one face alone
# takes a few seconds.
@pytest.mark.timeout(90)
@pytest.mark.parametrize("face", FACES)
def test_every_face_survives_the_seeded_protocol_fuzz(
    world: tuple[Server, tuple[bytes, ...]], rng: random.Random, request: pytest.FixtureRequest, face: str
) -> None:
    server, paths = world
    if face in MCP_FACES:
        path, templates = MCP_FACES[face]
        tally = Tally(face)
        run_mcp(Run(server, tally, rng, paths), PER_FACE, path, templates, legacy_session(server, path))
    elif face == "sse":
        tally = run_sse(Run(server, Tally("sse"), rng, paths), PER_FACE)
    elif face == "api/v1":
        tally = run_api(Run(server, Tally("api/v1"), rng, paths), PER_FACE)
    else:
        tally = run_stdio(server, Tally("stdio"), rng, paths, PER_FACE)
    notifications_ran(tally, server)
    failures = fuzz.summarise(request, [tally.done()])
    assert not failures, "\n".join(failures)


def test_serve_logged_nothing_the_fuzz_may_not_cause(
    world: tuple[Server, tuple[bytes, ...]], request: pytest.FixtureRequest
) -> None:
    """After the faces' fuzz (the tests before this one): serve's own output."""
    server, _ = world
    log = Tally("serve log")
    fuzz.scan(log, "".join(server.close()).encode(), "serve's output", ())
    failures = fuzz.summarise(request, [log])
    assert not failures, "\n".join(failures)
