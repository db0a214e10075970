"""JSON-RPC 2.0 framing: strict parsing of one message, and response shapes.

Hostile input is the norm here (RELIABILITY.md PROTO-01..07): orjson rejects NaN,
Infinity, lone surrogates, a BOM and nesting deeper than 1024 without recursing in Python;
duplicate keys resolve last-wins once, at parse time, so every later step (grant check,
validation, dispatch) sees the same value. Batches are refused: MCP dropped them after
2025-03-26 and each item would need its own authorisation and charge.

Nesting is limited far below orjson's 1024 (``MAX_DEPTH``): a document 990 levels deep
parses, and then every recursive step after it (the admin API's text check, ``repr`` of an
argument for its audit row, orjson's encoder at 254) fails with a RecursionError. One limit,
checked where each face parses, keeps every later step well inside the stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from appliance.errors import ApplianceError, InvalidParams, InvalidRequest, ParseError

Id = str | int
MAX_ID_LENGTH = 256
# Deepest nesting of arrays and objects any face accepts in a JSON document (``{}`` is 1).
# A JSON-RPC envelope uses two levels before a tool's arguments begin; tool schemas are
# translated at most a few dozen levels deep, so deeper arguments could match no schema.
MAX_DEPTH = 64


def too_deep(doc: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``doc`` nests arrays and objects more than ``limit`` levels; no recursion."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def could_be_too_deep(body: bytes | str, limit: int = MAX_DEPTH) -> bool:
    """A cheap first look: a document with ``limit`` brackets or fewer cannot nest deeper."""
    if isinstance(body, str):
        return body.count("[") + body.count("{") > limit
    return body.count(b"[") + body.count(b"{") > limit


# A JSON string (possessive: never backtracks) or one bracket; everything else is skipped.
_STRUCTURE = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[\[\]{}]')


def text_too_deep(body: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON text (valid or not) opens more than ``limit`` brackets at once: for a body
    its parser gave up on, to tell "too deep" from "not JSON". Linear, no recursion."""
    depth = 0
    for match in _STRUCTURE.finditer(body):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


def nesting_refusal(where: str) -> str:
    return f"{where} nests arrays and objects deeper than {MAX_DEPTH} levels (the limit)"


@dataclass(frozen=True)
class Message:
    kind: str  # "request", "notification" or "response"
    method: str | None
    id: Id | None
    params: dict[str, Any]
    raw: dict[str, Any]
    # A request whose params nest deeper than MAX_DEPTH: refused by the dispatcher before
    # any handler runs, where a tools/call can still leave its audit row.
    refusal: ApplianceError | None = None

    @property
    def meta(self) -> dict[str, Any]:
        meta = self.params.get("_meta")
        return meta if isinstance(meta, dict) else {}


def _valid_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and len(value) <= MAX_ID_LENGTH


def parse(body: bytes) -> Message:
    """One JSON-RPC message from a request body, or ParseError / InvalidRequest.

    ``InvalidRequest.data["id"]`` carries the request's id when it was a valid one, so the
    error can echo it.
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ParseError("body is not valid JSON") from None
    if isinstance(doc, list):
        raise InvalidRequest("batch requests are not supported; send one message per POST", field="batch")
    if not isinstance(doc, dict):
        raise InvalidRequest("a JSON-RPC message must be an object", field="message")
    msg_id = doc.get("id")
    echo = {"id": msg_id} if "id" in doc and _valid_id(msg_id) else {}
    deep = could_be_too_deep(body) and too_deep(doc)
    if deep and not _deep_request(doc):
        limit = {**echo, "limit": MAX_DEPTH}
        raise InvalidRequest(nesting_refusal("the message"), field="message", data=limit)
    if doc.get("jsonrpc") != "2.0":
        raise InvalidRequest("'jsonrpc' must be the string \"2.0\"", field="jsonrpc", data=echo)
    if "method" in doc:
        method = doc["method"]
        if not isinstance(method, str) or not method:
            raise InvalidRequest("'method' must be a non-empty string", field="method", data=echo)
        params = doc.get("params", {})
        if not isinstance(params, dict):
            raise InvalidRequest("'params' must be an object", field="params", data=echo)
        if "id" not in doc:
            return Message("notification", method, None, params, doc)
        if not _valid_id(msg_id):
            raise InvalidRequest(
                "'id' must be a string (at most 256 characters) or an integer, never null",
                field="id",
            )
        if deep:
            refusal = InvalidParams(nesting_refusal("params"), field="params", data={"limit": MAX_DEPTH})
            return Message("request", method, msg_id, params, doc, refusal)
        return Message("request", method, msg_id, params, doc)
    if "id" in doc and ("result" in doc) != ("error" in doc):
        return Message("response", None, msg_id if _valid_id(msg_id) else None, {}, doc)
    raise InvalidRequest(
        "message is neither a request, a notification nor a response", field="method", data=echo
    )


def _deep_request(doc: dict[str, Any]) -> bool:
    """A well-formed request whose depth lies in its params (every other member is flat)."""
    method, params = doc.get("method"), doc.get("params")
    return (
        isinstance(method, str)
        and bool(method)
        and isinstance(params, dict)
        and "id" in doc
        and _valid_id(doc["id"])
        and not any(isinstance(v, dict | list) for k, v in doc.items() if k != "params")
    )


def result(msg_id: Id | None, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "result": value}


def error(msg_id: Id | None, exc: ApplianceError, correlation: str | None = None) -> dict[str, Any]:
    data = exc.payload()
    data.pop("id", None)
    message = exc.public_message
    if correlation is not None:
        data["correlation_id"] = correlation
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": exc.rpc_code, "message": message, "data": data}}


def encode(payload: dict[str, Any]) -> bytes:
    return orjson.dumps(payload)
