"""A real HTTP upstream for credential tests: it echoes what it received and runs an OAuth server.

- ``GET /api/echo``: 200 with the request's headers, query and cookies as JSON, i.e. an
  upstream that echoes our secrets back (the gateway must redact them).
- ``GET /api/private``: 401 unless ``Authorization: Bearer <current access token>``;
  then the same echo.
- ``GET /api/big?n=N``: N bytes of JSON string.
- ``POST /oauth/token``: refresh-token grant (client_secret_basic or post). Each refresh
  issues a new access token and a new refresh token (rotation) and accepts only the newest
  refresh token, so a gateway that forgets a rotated token fails the next refresh.

Every request is recorded (``requests``); ``revoke()`` invalidates the current access token.
"""

from __future__ import annotations

import base64
import secrets
import threading
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote

from tests.support.servers import JsonHandler, Recorded, read_request

SPEC_SCHEMES = {
    "key_header": {"type": "apiKey", "in": "header", "name": "X-Api-Key"},
    "key_query": {"type": "apiKey", "in": "query", "name": "api_key"},
    "key_cookie": {"type": "apiKey", "in": "cookie", "name": "session"},
    "token": {"type": "http", "scheme": "bearer"},
    "pair": {"type": "http", "scheme": "basic"},
}


def echo_spec(base_url: str) -> dict[str, Any]:
    """An OpenAPI 3 document for this upstream (security schemes of every kind)."""
    return {
        "openapi": "3.0.3",
        "info": {"title": "Echo", "version": "1"},
        "servers": [{"url": base_url}],
        "components": {"securitySchemes": SPEC_SCHEMES},
        "security": [{"token": []}],
        "paths": {
            "/api/echo": {
                "get": {
                    "operationId": "echo",
                    "summary": "Echo the request",
                    "parameters": [
                        {"name": "q", "in": "query", "schema": {"type": "string"}},
                        {"name": "X-Api-Key", "in": "header", "schema": {"type": "string"}},
                        {"name": "X-Note", "in": "header", "schema": {"type": "string"}},
                    ],
                    "responses": {"200": {"description": "ok"}},
                }
            },
            "/api/private": {"get": {"operationId": "private", "responses": {"200": {"description": "ok"}}}},
            "/api/big": {
                "get": {
                    "operationId": "big",
                    "parameters": [{"name": "n", "in": "query", "schema": {"type": "integer"}}],
                    "responses": {"200": {"description": "ok"}},
                }
            },
        },
    }


class EchoUpstream:
    def __init__(
        self, *, client_id: str = "client-1", client_secret: str = "", refresh_token: str = ""
    ) -> None:
        self.requests: list[Recorded] = []
        self.client_id = client_id
        self.client_secret = client_secret
        self.refresh_token = refresh_token
        self.access_token = ""
        self.refreshes = 0
        self.expires_in = 3600
        self.lock = threading.Lock()
        outer = self

        class Handler(JsonHandler):
            def _record(self) -> Recorded:
                rec = read_request(self)
                with outer.lock:
                    outer.requests.append(rec)
                return rec

            def _echo(self, rec: Recorded) -> None:
                self._send(200, {"headers": rec.headers, "query": rec.query, "path": rec.path})

            def do_GET(self) -> None:
                rec = self._record()
                if rec.path == "/api/echo":
                    self._echo(rec)
                elif rec.path == "/api/private":
                    with outer.lock:
                        good = bool(outer.access_token) and rec.headers.get("authorization") == (
                            f"Bearer {outer.access_token}"
                        )
                    if good:
                        self._echo(rec)
                    else:
                        # A careless upstream: it quotes the rejected header back.
                        self._send(401, {"error": "invalid_token", "got": rec.headers.get("authorization")})
                elif rec.path == "/api/big":
                    self._send(200, "x" * int(rec.query.get("n", ["10"])[0]))
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                rec = self._record()
                if rec.path != "/oauth/token":
                    self._send(404, {"error": "not found"})
                    return
                form = {k: v[0] for k, v in parse_qs(rec.body.decode()).items()}
                client_id, client_secret = form.get("client_id"), form.get("client_secret", "")
                auth = rec.headers.get("authorization", "")
                if auth.startswith("Basic "):
                    user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
                    client_id, client_secret = unquote(user), unquote(password)
                with outer.lock:
                    if (client_id, client_secret) != (outer.client_id, outer.client_secret):
                        self._send(401, {"error": "invalid_client", "echo": rec.body.decode()})
                        return
                    if (
                        form.get("grant_type") != "refresh_token"
                        or form.get("refresh_token") != outer.refresh_token
                    ):
                        self._send(400, {"error": "invalid_grant", "echo": rec.body.decode()})
                        return
                    outer.refreshes += 1
                    outer.access_token = f"AT{outer.refreshes}-{secrets.token_hex(12)}"
                    outer.refresh_token = f"RT{outer.refreshes}-{secrets.token_hex(12)}"
                    self._send(
                        200,
                        {
                            "access_token": outer.access_token,
                            "token_type": "Bearer",
                            "expires_in": outer.expires_in,
                            "refresh_token": outer.refresh_token,
                        },
                    )

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # the gateway hanging up on an over-cap answer is expected, not news

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def revoke(self) -> None:
        with self.lock:
            self.access_token = "revoked-" + secrets.token_hex(8)

    def __enter__(self) -> EchoUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def oauth_body(echo: EchoUpstream, refresh_token: str, **extra: str) -> dict[str, str]:
    """An oauth2 credential for ``echo``'s token endpoint, with ``refresh_token``."""
    return {
        "scheme": "oauth2",
        "token_url": echo.base_url + "/oauth/token",
        "client_id": echo.client_id,
        "client_secret": echo.client_secret,
        "refresh_token": refresh_token,
        **extra,
    }
