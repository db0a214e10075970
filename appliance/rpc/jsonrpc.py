"""JSON-RPC 2.0 framing: strict parsing of one message, and response shapes.

Hostile input is the norm here (RELIABILITY.md PROTO-01..07): orjson rejects NaN,
Infinity, lone surrogates, a BOM and nesting deeper than 1024 without recursing in Python;
duplicate keys resolve last-wins once, at parse time, so every later step (grant check,
validation, dispatch) sees the same value. Batches are refused: MCP dropped them after
2025-03-26 and each item would need its own authorisation and charge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from appliance.errors import ApplianceError, InvalidRequest, ParseError

Id = str | int
MAX_ID_LENGTH = 256


@dataclass(frozen=True)
class Message:
    kind: str  # "request", "notification" or "response"
    method: str | None
    id: Id | None
    params: dict[str, Any]
    raw: dict[str, Any]

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
        return Message("request", method, msg_id, params, doc)
    if "id" in doc and ("result" in doc) != ("error" in doc):
        return Message("response", None, msg_id if _valid_id(msg_id) else None, {}, doc)
    raise InvalidRequest(
        "message is neither a request, a notification nor a response", field="method", data=echo
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
