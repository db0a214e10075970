"""Streamable HTTP's MCP headers: the session id (2025 era) and, in 2026-07-28, the routing
headers that mirror a request's body so that a load balancer can route on them.

A server must refuse a request whose routing headers disagree with its body
(streamable-http.mdx "Server Validation"); a client sets them from the body it sends.
"""

from __future__ import annotations

SESSION_HEADER = "Mcp-Session-Id"
VERSION_HEADER = "MCP-Protocol-Version"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"
# As a server reads them (header names are case-insensitive).
ROUTING_HEADERS = tuple(h.lower() for h in (VERSION_HEADER, METHOD_HEADER, NAME_HEADER))
# Methods whose target is mirrored into Mcp-Name, and the body field it mirrors.
NAME_BEARING = {"tools/call": "name", "resources/read": "uri", "prompts/get": "name"}
