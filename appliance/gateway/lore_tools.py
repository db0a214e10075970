"""The tools of a Lore toolkit and their answers, run in process: the pipeline's dispatch stage.

A Lore tool is an ordinary stored tool (kind ``read``, source kind ``lore``), so everything
before and after dispatch (resolve within the caller's scope, runner, validation against
the input schema below, quota, fee, credential stage, redaction, audit) is the pipeline's
and the same as for any toolkit. Only ``answer`` differs: instead of an upstream, it reads
the toolkit's own documents (``lore/store.py``), and keeps every answer within the toolkit's
response cap (``PreparedCall.max_bytes``) as an upstream's answer would be kept.
"""

from __future__ import annotations

from typing import Any

import orjson

from appliance.errors import UpstreamError
from appliance.gateway import lore_search
from appliance.gateway.runtime import Runtime
from appliance.lore import store as lore_store
from appliance.models import CallResult, Kind, Tool
from appliance.search.text import MAX_QUERY_CHARS

SEARCH, LIST, READ = "search_lore", "list_documents", "read_document"
DEFAULT_PASSAGES, MAX_PASSAGES = 8, 50
DEFAULT_PAGE, MAX_PAGE = 100, 1_000
DEFAULT_READ = 20_000  # characters
_ENVELOPE = 2_048  # bytes kept for the answer's own fields around a document's text

# (action, title, description, input schema), the tools every Lore toolkit has.
TOOLS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    (
        SEARCH,
        "Search the knowledge base",
        "Find the passages of this knowledge base that answer a question or mention some words, "
        "best first. Each passage names its document (document_id, path, title), the heading it is "
        "under and its position (offset and length, in characters), with a snippet; read more "
        "around it with read_document.",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_PASSAGES,
                    "default": DEFAULT_PASSAGES,
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
    (
        LIST,
        "List the documents",
        "The documents of this knowledge base by path: id, title, format and size in characters. "
        "Pages through many with offset and limit.",
        {
            "type": "object",
            "properties": {
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": DEFAULT_PAGE},
            },
            "additionalProperties": False,
        },
    ),
    (
        READ,
        "Read a document",
        "The text of one document (its id from search_lore or list_documents) from offset, at most "
        "length characters; an answer over the toolkit's response cap is cut short and says where "
        "to go on (next_offset).",
        {
            "type": "object",
            "properties": {
                "id": {"type": "integer", "minimum": 1},
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "length": {"type": "integer", "minimum": 1, "maximum": 10_000_000, "default": DEFAULT_READ},
            },
            "required": ["id"],
            "additionalProperties": False,
        },
    ),
)
KIND: Kind = "read"


async def answer(rt: Runtime, tool: Tool, arguments: dict[str, Any], *, max_bytes: int) -> CallResult:
    """One call of a Lore tool; the arguments were validated against its schema already."""
    action = (tool.binding or {}).get("lore")
    value: dict[str, Any] | None
    if action == SEARCH:  # ranks in two reads around the query's embedding (lore_search.py)
        return _answered(await _search(rt, tool.toolkit_id, arguments, max_bytes))
    async with rt.db.read() as conn:
        if action == LIST:
            value = await _list(conn, tool.toolkit_id, arguments, max_bytes)
        elif action == READ:
            value = await _read(conn, tool.toolkit_id, arguments, max_bytes)
        else:
            raise UpstreamError(f"{tool.name} is not a Lore tool this version knows", reason="no_upstream")
    if value is None:
        return CallResult(
            content=[{"type": "text", "text": f"no document {arguments.get('id')} in this knowledge base"}],
            is_error=True,
            meta={"reason": "not_found"},
        )
    return _answered(value)


def _answered(value: dict[str, Any]) -> CallResult:
    return CallResult(content=[{"type": "text", "text": orjson.dumps(value).decode()}], structured=value)


def _fits(value: Any, max_bytes: int) -> bool:
    return len(orjson.dumps(value)) <= max_bytes


async def _search(rt: Runtime, toolkit_id: int, args: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    query = str(args["query"])
    limit = min(int(args.get("limit") or DEFAULT_PASSAGES), MAX_PASSAGES)
    passages, ranking = await lore_search.passages(rt, toolkit_id, query, limit=limit)
    value: dict[str, Any] = {"query": query, "ranking": ranking, "passages": passages}
    while passages and not _fits(value, max_bytes):
        passages.pop()  # the least relevant go first; a snippet is short, so few ever do
        value["truncated"] = True
    return value


async def _list(conn: Any, toolkit_id: int, args: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    offset = int(args.get("offset") or 0)
    limit = min(int(args.get("limit") or DEFAULT_PAGE), MAX_PAGE)
    docs, total = await lore_store.list_documents(conn, toolkit_id, offset=offset, limit=limit)
    value: dict[str, Any] = {"documents": docs, "total": total, "offset": offset}
    while docs and not _fits(value, max_bytes):
        docs.pop()
    end = offset + len(docs)
    value["next_offset"] = end if end < total else None
    return value


async def _read(conn: Any, toolkit_id: int, args: dict[str, Any], max_bytes: int) -> dict[str, Any] | None:
    offset = int(args.get("offset") or 0)
    budget = max(256, max_bytes - _ENVELOPE)
    # A character is at most 4 bytes and JSON escapes at most 6 per character: ask for no more
    # than could fit, so a huge length never loads a huge text.
    length = min(int(args.get("length") or DEFAULT_READ), budget)
    found = await lore_store.read_range(conn, toolkit_id, int(args["id"]), offset, length)
    if found is None:
        return None
    text: str = found.pop("text")
    while text and len(orjson.dumps(text)) > budget:
        text = text[: len(text) * budget // len(orjson.dumps(text)) or len(text) // 2]
    end = offset + len(text)
    return {
        **found,
        "offset": offset,
        "length": len(text),
        "next_offset": end if end < found["characters"] else None,
        "text": text,
    }
