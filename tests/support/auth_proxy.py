"""A loopback HTTP forwarder that adds ``Authorization: Bearer <key>`` to every request.

The MCP conformance suite has no option to send headers, and the gateway answers 401 to
a request without a key (there is no anonymous mode). This forwarder sits in between and
changes nothing else: ``Host``, ``Origin`` and every other header reach the gateway as
the suite sent them, so the gateway's own DNS-rebinding checks are what the suite tests.

One request per connection (``Connection: close`` both ways) keeps it small: the response
is streamed back byte for byte until the gateway closes, SSE included.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from types import TracebackType

HEAD_LIMIT = 64 * 1024
IO_TIMEOUT = 30.0  # every socket read and write is bounded


def _read_head(sock: socket.socket, buffer: bytes = b"") -> tuple[bytes, bytes]:
    """The head up to (excluding) the blank line, and whatever followed it."""
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > HEAD_LIMIT:
            raise ValueError("head too large")
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the end of the head")
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    return head, rest


def _rewrite(head: bytes, drop: set[bytes], add: list[bytes]) -> bytes:
    lines = head.split(b"\r\n")
    kept = [lines[0]] + [ln for ln in lines[1:] if ln.split(b":", 1)[0].strip().lower() not in drop]
    return b"\r\n".join([*kept, *add]) + b"\r\n\r\n"


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def _read_body(sock: socket.socket, head: bytes, rest: bytes) -> bytes:
    length = _header(head, b"content-length")
    if length is not None:
        needed = int(length)
        while len(rest) < needed:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed mid-body")
            rest += chunk
        return rest[:needed]
    if (_header(head, b"transfer-encoding") or b"").lower() == b"chunked":
        while not rest.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed mid-body")
            rest += chunk
    return rest


class AuthProxy:
    """``with AuthProxy(target_port, key) as proxy:`` then use ``proxy.port``."""

    def __init__(self, target_port: int, key: str) -> None:
        auth = b"Authorization: Bearer " + key.encode()
        target = ("127.0.0.1", target_port)

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                client: socket.socket = self.request
                client.settimeout(IO_TIMEOUT)
                try:
                    head, rest = _read_head(client)
                    body = _read_body(client, head, rest)
                    with socket.create_connection(target, timeout=IO_TIMEOUT) as upstream:
                        drop = {b"authorization", b"connection", b"keep-alive"}
                        upstream.sendall(_rewrite(head, drop, [auth, b"Connection: close"]) + body)
                        reply_head, reply_rest = _read_head(upstream)
                        drop = {b"connection", b"keep-alive"}
                        client.sendall(_rewrite(reply_head, drop, [b"Connection: close"]) + reply_rest)
                        while chunk := upstream.recv(65536):
                            client.sendall(chunk)
                except (OSError, ValueError):
                    pass  # the client sees the connection close; the suite reports it

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1})

    def __enter__(self) -> AuthProxy:
        self.thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"
