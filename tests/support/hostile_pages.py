"""Upstream text that tries to run in the console: script tags, event handlers, ``javascript:``
URLs, template syntax. Used by the console's in-process and browser tests, in an OpenAPI spec
and in the tools of a stdio MCP server (``tiny_stdio.py`` given ``mcp_tools()``).

Each payload, if it ran, would set ``window.__pwned`` (or open a dialog); ``{{7*7}}`` would
read ``49`` if any template evaluated it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support import tiny_stdio

PAYLOADS = (
    "<script>window.__pwned = 'script'</script>",
    "<img src=x onerror=\"window.__pwned = 'img'\">",
    "javascript:window.__pwned='url'",
    '"><svg onload="window.__pwned=\'svg\'"></svg>',
    "{{7*7}} {% if 1 %}jinja{% endif %} ${7*7}",
    '<a href="javascript:alert(1)">click</a> <iframe src="javascript:alert(2)"></iframe>',
    '<div hx-get="/console/sign-out" hx-trigger="load">htmx</div>',
)
TEXT = " ".join(PAYLOADS)
TEMPLATE = "{{7*7}}"


def openapi_spec(server: str = "http://127.0.0.1:9/") -> dict[str, Any]:
    """A valid OpenAPI 3 document whose every shown string carries the payloads."""
    return {
        "openapi": "3.0.3",
        "info": {"title": "Hostile " + TEXT, "version": "1", "description": TEXT},
        "tags": [{"name": PAYLOADS[3], "description": PAYLOADS[1]}],
        "servers": [{"url": server}],
        "externalDocs": {"url": "javascript:window.__pwned='docs'"},
        "paths": {
            "/items": {
                "get": {
                    "operationId": "listItems",
                    "summary": "List " + PAYLOADS[0],
                    "description": TEXT,
                    "parameters": [
                        {"name": "q", "in": "query", "description": TEXT, "schema": {"type": "string"}}
                    ],
                    "responses": {"200": {"description": TEXT}},
                }
            }
        },
    }


def mcp_tools() -> list[dict[str, Any]]:
    """Tools whose names, titles and descriptions carry the payloads."""
    return [
        {
            "name": "safe_name",
            "title": PAYLOADS[1],
            "description": TEXT,
            "inputSchema": {"type": "object", "properties": {"x": {"type": "string", "description": TEXT}}},
            "annotations": {"readOnlyHint": True},
        },
        {
            "name": "<img src=x onerror=window.__pwned=1>",
            "description": PAYLOADS[0],
            "inputSchema": {"type": "object"},
        },
        {"name": "javascript:alert(1)", "description": TEMPLATE, "inputSchema": {"type": "object"}},
    ]


def mcp_connection(folder: Path) -> dict[str, Any]:
    """A stdio connection to a server listing ``mcp_tools()`` (its tools file in ``folder``,
    which the sandbox must let it read: ``servers.sandbox_reading(folder)``)."""
    folder.mkdir(parents=True, exist_ok=True)
    tools = folder / "hostile-tools.json"
    tools.write_text(json.dumps(mcp_tools()))
    return tiny_stdio.connection(tools)
