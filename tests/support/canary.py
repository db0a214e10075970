"""Credential canaries: unique secrets, every encoding a leak could take, and upstreams that
try hard to leak them (they echo what they received in results and in errors).

``forms`` is deliberately wider than what the gateway redacts (``appliance/secret.py``): it
also knows base64 of the secret embedded at any alignment (``user:<secret>``, ``::<secret>``),
URL-encoding with lower-case escapes and a leading fragment, so the sweep finds what the
redactor misses.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, quote_plus

from tests.support.servers import JsonHandler, Recorded, read_request

CORE = 16  # the shortest base64 run searched for: long enough to be unique to one secret


def canary(kind: str) -> str:
    """A unique secret; ``+`` and ``/`` make its URL-encoded and base64 forms differ from it."""
    return f"cnry{kind}{secrets.token_hex(10)}+/{secrets.token_hex(10)}"


def _b64_cores(raw: bytes) -> list[tuple[str, str]]:
    """Base64 runs that encode only bytes of ``raw`` whatever precedes it (alignment 0, 1, 2)
    and whatever follows (the last group is dropped), std and url-safe."""
    out = []
    for align, skip in ((0, 0), (1, 2), (2, 3)):
        encoded = base64.b64encode(b"\0" * align + raw).decode()
        core = encoded[skip : len(encoded) - 4]
        if len(core) >= CORE:
            out.append((f"base64@{align}", core))
            out.append((f"base64url@{align}", core.replace("+", "-").replace("/", "_")))
    return out


def forms(value: str) -> list[tuple[str, str]]:
    """(name, text) for every form of ``value`` a leak could take."""
    raw = value.encode()
    quoted = quote(value, safe="")
    out = [
        ("exact", value),
        ("head", value[: len(value) // 2]),  # a message cut short still leaks half of it
        ("url", quoted),
        ("url-lower", quoted.replace("%2B", "%2b").replace("%2F", "%2f")),
        ("url-plus", quote_plus(value)),
        ("json", json.dumps(value)[1:-1].replace("/", "\\/")),
        ("hex", raw.hex()),
        ("HEX", raw.hex().upper()),
    ]
    return out + _b64_cores(raw)


@dataclass
class Sweep:
    """Canaries by kind, and every place one was found (where, kind, form)."""

    canaries: dict[str, str] = field(default_factory=dict)
    found: list[str] = field(default_factory=list)
    looked: dict[str, int] = field(default_factory=dict)  # bytes searched per place

    def add(self, kind: str, value: str | None = None) -> str:
        self.canaries[kind] = value or canary(kind)
        return self.canaries[kind]

    def search(self, where: str, data: bytes | str) -> None:
        blob = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
        self.looked[where] = self.looked.get(where, 0) + len(blob)
        for kind, value in self.canaries.items():
            for name, text in forms(value):
                at = blob.find(text.encode())
                if at >= 0:
                    context = blob[max(0, at - 60) : at + len(text) + 20]
                    self.found.append(f"{where}: {kind} as {name}: …{context!r}…")
                    break


class CanaryHttpUpstream:
    """An OpenAPI upstream that leaks everything it is sent.

    ``GET /api/echo``: 200 with the request's headers and query (a successful result that
    echoes the credential). ``GET /api/fail``: 500 whose text quotes them ("token Bearer …
    revoked"). ``GET /api/seen``: every request it was ever sent, whichever toolkit sent it
    (another toolkit's secret in this one's answer). ``GET /api/private``: needs the OAuth
    access token, then echoes. ``POST /oauth/token``: the refresh grant; once
    ``refuse_grants`` is set it answers 400 quoting the form it got (refresh token and client
    secret included).
    """

    def __init__(self, client_id: str, client_secret: str, refresh_token: str) -> None:
        self.client_id, self.client_secret, self.refresh_token = client_id, client_secret, refresh_token
        self.access_tokens: list[str] = []
        self.refuse_grants = False
        self.requests: list[Recorded] = []
        outer = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                rec = read_request(self)
                outer.requests.append(rec)
                seen = {"headers": rec.headers, "query": rec.query}
                if rec.path == "/api/echo":
                    self._send(200, seen)
                elif rec.path == "/api/fail":
                    quoted = f"token {rec.headers.get('authorization')} revoked; we got {json.dumps(seen)}"
                    self._send(500, {"error": quoted})
                elif rec.path == "/api/seen":
                    # A shared upstream's access log: every toolkit's credential it was ever sent.
                    self._send(200, [{"headers": r.headers, "query": r.query} for r in outer.requests])
                elif rec.path == "/api/private":
                    good = rec.headers.get("authorization") in {f"Bearer {t}" for t in outer.access_tokens}
                    self._send(200 if good else 401, seen if good else {"error": f"bad {seen}"})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                rec = read_request(self)
                outer.requests.append(rec)
                form = {k: v[0] for k, v in parse_qs(rec.body.decode()).items()}
                echo = {"form": form, "authorization": rec.headers.get("authorization")}
                if outer.refuse_grants or form.get("refresh_token") != outer.refresh_token:
                    self._send(400, {"error": "invalid_grant", "error_description": json.dumps(echo)})
                    return
                token = f"cnryAT{secrets.token_hex(12)}"
                outer.access_tokens.append(token)
                self._send(200, {"access_token": token, "token_type": "Bearer", "expires_in": 3600})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def spec(self) -> dict[str, Any]:
        op = {"responses": {"200": {"description": "ok"}}}
        q = [{"name": "q", "in": "query", "schema": {"type": "string"}}]
        return {
            "openapi": "3.0.3",
            "info": {"title": "Canary", "version": "1"},
            "servers": [{"url": self.base_url}],
            "components": {
                "securitySchemes": {
                    "key_header": {"type": "apiKey", "in": "header", "name": "X-Api-Key"},
                    "key_query": {"type": "apiKey", "in": "query", "name": "api_key"},
                    "key_cookie": {"type": "apiKey", "in": "cookie", "name": "session"},
                    "token": {"type": "http", "scheme": "bearer"},
                    "pair": {"type": "http", "scheme": "basic"},
                }
            },
            "paths": {
                "/api/echo": {"get": {"operationId": "echo", "parameters": q, **op}},
                "/api/fail": {"get": {"operationId": "fail", "parameters": q, **op}},
                "/api/private": {"get": {"operationId": "private", **op}},
                "/api/seen": {"get": {"operationId": "seen", **op}},
            },
        }

    def __enter__(self) -> CanaryHttpUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


class CanaryMcpUpstream:
    """A minimal streamable-HTTP MCP server (JSON answers, no session) that leaks its caller's
    headers: ``echo`` returns them; with ``failing`` set every request is answered with an
    error quoting them, as JSON-RPC (``failing="rpc"``) or as HTTP 401 (``failing="http"``)."""

    def __init__(self) -> None:
        self.failing = ""
        outer = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                rec = read_request(self)
                try:
                    msg = json.loads(rec.body)
                except ValueError:
                    self._send(400, {"error": "bad json"})
                    return
                quoted = (
                    f"token {rec.headers.get('authorization')} revoked; headers {json.dumps(rec.headers)}"
                )
                if "id" not in msg:
                    self.send_response(202)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if outer.failing == "http":
                    self._send(401, {"error": quoted})
                    return
                reply: dict[str, Any] = {"jsonrpc": "2.0", "id": msg["id"]}
                method = msg.get("method")
                if outer.failing == "rpc":
                    reply["error"] = {"code": -32000, "message": quoted}
                elif method == "initialize":
                    reply["result"] = {
                        "protocolVersion": msg.get("params", {}).get("protocolVersion", "2025-11-25"),
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "canary", "version": "1"},
                    }
                elif method == "tools/list":
                    schema = {"type": "object", "properties": {}}
                    tools = [
                        {"name": "echo", "inputSchema": schema, "annotations": {"readOnlyHint": True}},
                        {"name": "fail", "inputSchema": schema, "annotations": {"readOnlyHint": True}},
                    ]
                    reply["result"] = {"tools": tools}
                elif method == "tools/call" and msg.get("params", {}).get("name") == "fail":
                    reply["result"] = {"content": [{"type": "text", "text": quoted}], "isError": True}
                elif method == "tools/call":
                    text = json.dumps(rec.headers)
                    reply["result"] = {"content": [{"type": "text", "text": text}], "isError": False}
                elif method == "ping":
                    reply["result"] = {}
                else:
                    reply["error"] = {"code": -32601, "message": f"no method {method}"}
                self._send(200, reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/mcp"

    def __enter__(self) -> CanaryMcpUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def b64_basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()
