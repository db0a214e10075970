"""An OAuth 2.1 authorization server and an MCP server that validates its tokens, on loopback.

One ``ThreadingHTTPServer`` in a thread of the test's process serves both, at one origin:

- RFC 9728 protected-resource metadata for ``/mcp``, RFC 8414 authorization-server metadata
  (PKCE S256 only, ``none`` client authentication, registration, revocation; with
  ``cimd_origins``, Client ID Metadata Documents: a URL client_id's document is fetched at
  ``/authorize`` and its redirect URIs are the ones that hold);
- ``/register`` (RFC 7591), ``/authorize`` (the person is the ``who`` cookie, else
  ``OAuthWorld.login``; approves at once and redirects, after checking the client, the exact
  redirect URI, S256 and ``resource``; with ``consent`` and no ``who`` cookie it first shows
  a page where a browser names the account and presses Allow, a form posted back to
  ``/authorize``), ``/token`` (authorization code with the PKCE
  verifier, refresh tokens rotated at each use), ``/revoke`` (RFC 7009);
- ``/mcp``: a small streamable-HTTP MCP server (2025-11-25 handshake, one tool ``whoami``
  answering the name behind the token) that refuses any request without a live access
  token: 401 with ``WWW-Authenticate: Bearer resource_metadata=...``;
- ``/api/whoami``: the same check in front of a plain REST operation (``openapi_spec``), for
  OpenAPI toolkits.

Everything is recorded for assertions: every ``/mcp`` request with the user its token
belongs to (``mcp_requests``), the token grants made (``grants``), revocations.
"""

from __future__ import annotations

import base64
import hashlib
import html
import itertools
import json
import secrets
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

MCP_VERSION = "2025-11-25"


@dataclass
class Token:
    user: str
    kind: str  # access or refresh
    expires_at: float
    client_id: str
    revoked: bool = False


@dataclass
class OAuthWorld:
    base_url: str = ""
    login: str = "alice"
    lifetime_s: float = 3600.0
    consent: bool = False  # a browser without a ``who`` cookie sees a consent page first
    refuse_refresh: set[str] = field(default_factory=set)  # users whose refresh is refused
    static: dict[str, str] = field(default_factory=dict)  # fixed access tokens → user (an owner's)
    clients: dict[str, list[str]] = field(default_factory=dict)  # client_id → redirect URIs
    # Client ID Metadata Documents: an https origin a client_id URL may name → the http origin
    # that really serves it on loopback (this machine has no certificate for the https name;
    # the mapping stands in for its DNS and TLS). Non-empty: the server says it takes them.
    cimd_origins: dict[str, str] = field(default_factory=dict)
    cimd_fetches: list[str] = field(default_factory=list)  # the documents it fetched
    registrations: list[dict[str, Any]] = field(default_factory=list)  # RFC 7591 requests
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokens: dict[str, Token] = field(default_factory=dict)
    mcp_requests: list[tuple[str, str | None]] = field(default_factory=list)  # (method, user)
    grants: list[tuple[str, str]] = field(default_factory=list)  # (grant_type, user)
    revoked: list[str] = field(default_factory=list)  # users whose token was revoked
    api_requests: list[str | None] = field(default_factory=list)  # the user behind each /api call
    client_secrets: dict[str, str] = field(default_factory=dict)  # confidential clients: id → secret
    token_paths: list[str] = field(default_factory=list)  # the path of each token request
    authorize_queries: list[dict[str, str]] = field(default_factory=list)  # each /authorize request
    lock: threading.Lock = field(default_factory=threading.Lock)
    counter: Iterator[int] = field(default_factory=itertools.count)

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    def calls_by(self) -> list[str | None]:
        """The user behind each tools/call that reached the MCP server, in order."""
        return [user for method, user in self.mcp_requests if method == "tools/call"]

    def expire(self, user: str) -> None:
        """Every access token of ``user`` expires now (the refresh token lives on)."""
        with self.lock:
            for t in self.tokens.values():
                if t.user == user and t.kind == "access":
                    t.expires_at = 0

    def _issue(self, user: str, client_id: str) -> dict[str, Any]:
        n = next(self.counter)
        access = f"at-{user}-{n}-{secrets.token_urlsafe(12)}"
        refresh = f"rt-{user}-{n}-{secrets.token_urlsafe(12)}"
        now = time.time()
        self.tokens[access] = Token(user, "access", now + self.lifetime_s, client_id)
        self.tokens[refresh] = Token(user, "refresh", now + 86400, client_id)
        return {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": int(self.lifetime_s),
            "refresh_token": refresh,
            "scope": "tools offline_access",
        }

    def user_of(self, authorization: str | None) -> str | None:
        if not authorization or not authorization.startswith("Bearer "):
            return None
        value = authorization[7:]
        if value in self.static:
            return self.static[value]
        with self.lock:
            token = self.tokens.get(value)
            if token is None or token.kind != "access" or token.revoked or token.expires_at <= time.time():
                return None
            return token.user

    def metadata(self) -> dict[str, Any]:
        b = self.base_url
        return {
            "issuer": b,
            "authorization_endpoint": f"{b}/authorize",
            "token_endpoint": f"{b}/token",
            "registration_endpoint": f"{b}/register",
            "revocation_endpoint": f"{b}/revoke",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "scopes_supported": ["tools", "offline_access"],
            **({"client_id_metadata_document_supported": True} if self.cimd_origins else {}),
        }

    def client_document(self, client_id: str) -> list[str] | None:
        """A URL client_id's redirect URIs, from the document fetched at that URL (its
        ``client_id`` must be the URL itself); None when it is not one or does not hold."""
        parts = urlsplit(client_id)
        origin = f"{parts.scheme}://{parts.netloc}"
        if parts.scheme != "https" or origin not in self.cimd_origins:
            return None
        real = self.cimd_origins[origin] + parts.path
        try:
            with urllib.request.urlopen(real, timeout=10) as answer:
                doc = json.loads(answer.read(65536))
        except (OSError, ValueError):
            return None
        with self.lock:
            self.cimd_fetches.append(client_id)
        if not isinstance(doc, dict) or doc.get("client_id") != client_id:
            return None
        uris = doc.get("redirect_uris")
        return [u for u in uris if isinstance(u, str)] if isinstance(uris, list) else None


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def world(self) -> OAuthWorld:
        return self.server.world

    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _form(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self._body().decode()).items()}

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        w = self.world
        if parts.path.startswith("/.well-known/oauth-protected-resource"):
            self._send(
                200,
                {"resource": w.mcp_url, "authorization_servers": [w.base_url], "scopes_supported": ["tools"]},
            )
        elif parts.path == "/.well-known/oauth-authorization-server":
            self._send(200, w.metadata())
        elif parts.path == "/authorize":
            self._authorize({k: v[0] for k, v in parse_qs(parts.query).items()})
        elif parts.path == "/api/whoami":
            user = w.user_of(self.headers.get("Authorization"))
            with w.lock:
                w.api_requests.append(user)
            if user is None:
                self._send(
                    401, {"error": "invalid_token"}, {"WWW-Authenticate": 'Bearer error="invalid_token"'}
                )
            else:
                self._send(200, {"user": user})
        else:
            self._send(404, {"error": "not_found"})

    def _client_authenticated(self, client_id: str, form: dict[str, str]) -> bool:
        """A confidential client's secret, by Basic (RFC 6749 §2.3.1) or in the form."""
        secret = self.world.client_secrets.get(client_id)
        if secret is None:
            return True
        header = self.headers.get("Authorization") or ""
        if header.startswith("Basic "):
            pair = base64.b64decode(header[6:]).decode()
            return pair == f"{client_id}:{secret}"
        return form.get("client_secret") == secret

    def _authorize(self, q: dict[str, str]) -> None:
        w = self.world
        with w.lock:
            w.authorize_queries.append(dict(q))
        uris = w.clients.get(q.get("client_id", "")) or w.client_document(q.get("client_id", ""))
        if uris is None or q.get("redirect_uri") not in uris:
            self._send(400, {"error": "invalid_client"})
            return
        if (
            q.get("code_challenge_method") != "S256"
            or not q.get("code_challenge")
            or q.get("resource") not in (None, w.mcp_url)  # an OpenAPI spec's flow sends none
        ):
            self._send(400, {"error": "invalid_request"})
            return
        cookie = self.headers.get("Cookie") or ""
        who = next((c.split("=", 1)[1] for c in cookie.split("; ") if c.startswith("who=")), None)
        if who is None and w.consent and self.command == "GET":
            self._consent(q)
            return
        who = who or q.get("login") or w.login
        code = secrets.token_urlsafe(16)
        with w.lock:
            w.codes[code] = {**q, "user": who}
        target = (
            q["redirect_uri"]
            + "?"
            + urlencode({"code": code, "state": q.get("state", ""), "iss": w.base_url})
        )
        self._send(302, None, {"Location": target})

    def _consent(self, q: dict[str, str]) -> None:
        """The page a person sees: which client asks, an account to sign in as, Allow."""
        hidden = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
            for k, v in q.items()
            if k != "login"
        )
        page = (
            "<!doctype html><html><head><meta charset=utf-8><title>Authorize</title>"
            '<link rel="icon" href="data:,"></head><body>'
            f"<h1>Authorize {html.escape(q.get('client_id', ''))}</h1>"
            f"<p>It asks for {html.escape(q.get('scope', ''))} on {html.escape(q.get('resource', ''))}.</p>"
            f'<form method="post" action="/authorize">{hidden}'
            '<label for="login">Sign in as</label><input id="login" name="login" required>'
            '<button type="submit">Allow</button></form></body></html>'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path == "/authorize":  # the consent page's Allow
            self._authorize(self._form())
        elif path == "/mcp":
            self._mcp()
        elif path == "/register":
            doc = json.loads(self._body() or b"{}")
            client_id = f"client-{secrets.token_hex(6)}"
            with self.world.lock:
                self.world.registrations.append(doc)
            self.world.clients[client_id] = list(doc.get("redirect_uris") or [])
            self._send(201, {"client_id": client_id, "token_endpoint_auth_method": "none", **doc})
        elif path in ("/token", "/refresh"):  # /refresh: an OpenAPI spec's refreshUrl
            self.world.token_paths.append(path)
            self._token(self._form())
        elif path == "/revoke":
            form = self._form()
            with self.world.lock:
                token = self.world.tokens.get(form.get("token", ""))
                if token is not None:
                    token.revoked = True
                    self.world.revoked.append(token.user)
                    if token.kind == "refresh":  # RFC 7009 §2.1: its access tokens go too
                        for t in self.world.tokens.values():
                            if t.user == token.user and t.client_id == token.client_id:
                                t.revoked = True
            self._send(200)
        else:
            self._send(404, {"error": "not_found"})

    def _token(self, form: dict[str, str]) -> None:
        w = self.world
        header = self.headers.get("Authorization") or ""
        if "client_id" not in form and header.startswith("Basic "):  # Basic names the client
            form = {**form, "client_id": base64.b64decode(header[6:]).decode().split(":", 1)[0]}
        with w.lock:
            if form.get("grant_type") == "authorization_code":
                held = w.codes.pop(form.get("code", ""), None)
                verifier = form.get("code_verifier", "")
                challenge = (
                    base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
                )
                if (
                    held is None
                    or held["code_challenge"] != challenge
                    or held["redirect_uri"] != form.get("redirect_uri")
                    or held["client_id"] != form.get("client_id")
                    or form.get("resource") not in (None, w.mcp_url)
                    or not self._client_authenticated(held["client_id"], form)
                ):
                    self._send(400, {"error": "invalid_grant"})
                    return
                w.grants.append(("authorization_code", held["user"]))
                self._send(200, w._issue(held["user"], held["client_id"]))
                return
            if form.get("grant_type") == "refresh_token":
                token = w.tokens.get(form.get("refresh_token", ""))
                if (
                    token is None
                    or token.kind != "refresh"
                    or token.revoked
                    or token.user in w.refuse_refresh
                ):
                    self._send(400, {"error": "invalid_grant"})
                    return
                token.revoked = True  # rotated: each refresh token is used once
                w.grants.append(("refresh_token", token.user))
                self._send(200, w._issue(token.user, token.client_id))
                return
        self._send(400, {"error": "unsupported_grant_type"})

    def _mcp(self) -> None:
        w = self.world
        raw = self._body()
        message = json.loads(raw or b"{}")
        method = message.get("method", "")
        user = w.user_of(self.headers.get("Authorization"))
        with w.lock:
            w.mcp_requests.append((method, user))
        if user is None:
            meta = f"{w.base_url}/.well-known/oauth-protected-resource/mcp"
            self._send(
                401, {"error": "invalid_token"}, {"WWW-Authenticate": f'Bearer resource_metadata="{meta}"'}
            )
            return
        if "id" not in message:
            self._send(202)
            return
        rid = message["id"]
        if method == "initialize":
            result: Any = {
                "protocolVersion": MCP_VERSION,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "oauth-world", "version": "1"},
            }
        elif method == "tools/list":
            result = {
                "tools": [
                    {
                        "name": "whoami",
                        "description": "Say which account the token belongs to.",
                        "inputSchema": {"type": "object", "properties": {}},
                        "annotations": {"readOnlyHint": True},
                    }
                ]
            }
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": f"you are {user}"}], "isError": False}
        elif method == "ping":
            result = {}
        else:
            self._send(
                200, {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no such method"}}
            )
            return
        self._send(200, {"jsonrpc": "2.0", "id": rid, "result": result}, {"Mcp-Session-Id": "s1"})

    def do_DELETE(self) -> None:
        self._send(200)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    world: OAuthWorld


def openapi_spec(world: OAuthWorld, **urls: str) -> dict[str, Any]:
    """An OpenAPI document of ``/api/whoami`` behind the world's OAuth (authorization code);
    ``urls`` replace the flow's ``authorizationUrl``, ``tokenUrl`` or add a ``refreshUrl``."""
    return {
        "openapi": "3.0.3",
        "info": {"title": "oauth-world rest", "version": "1"},
        "servers": [{"url": f"{world.base_url}/api"}],
        "components": {
            "securitySchemes": {
                "world": {
                    "type": "oauth2",
                    "flows": {
                        "authorizationCode": {
                            "authorizationUrl": f"{world.base_url}/authorize",
                            "tokenUrl": f"{world.base_url}/token",
                            "scopes": {"tools": "use the tools"},
                            **urls,
                        }
                    },
                }
            }
        },
        "security": [{"world": ["tools"]}],
        "paths": {
            "/whoami": {
                "get": {
                    "operationId": "whoami",
                    "summary": "Say which account the token belongs to.",
                    "responses": {"200": {"description": "the account"}},
                }
            }
        },
    }


@contextmanager
def oauth_world(**options: Any) -> Iterator[OAuthWorld]:
    """The world on 127.0.0.1 (a free port), served until the block ends."""
    server = _Server(("127.0.0.1", 0), _Handler)
    world = OAuthWorld(**options)
    world.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    server.world = world
    thread = threading.Thread(target=server.serve_forever, name="oauth-world", daemon=True)
    thread.start()
    try:
        yield world
    finally:
        server.shutdown()
        server.server_close()
