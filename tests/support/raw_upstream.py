"""An HTTP upstream on a raw socket, for the answers a well-behaved server library never sends.

Each path answers fixed bytes and closes the connection: a body that is not the JSON its
content type claims, a body cut short of its ``Content-Length``, a chunked body cut before
its last chunk, a status line that is not HTTP. A TLS ClientHello gets the plain-HTTP 400 a
real plain server sends (that is what an ``https://`` URL at a plain-HTTP port meets), and is
counted apart: no HTTP request arrived.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import Counter
from typing import Any


def _answer(head: bytes, body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\n" + head + b"Connection: close\r\n\r\n" + body


# path -> (operationId, the bytes sent back)
ANSWERS: dict[str, tuple[str, bytes]] = {
    "/badjson": (
        "badjson",
        _answer(b"Content-Type: application/json\r\nContent-Length: 13\r\n", b'{"n": 1, oops'),
    ),
    "/short": (
        "short",
        _answer(b"Content-Type: application/json\r\nContent-Length: 100\r\n", b'{"n": 1'),
    ),
    "/cut": (
        "cut",
        _answer(b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n", b'7\r\n{"n": 1\r\n'),
    ),
    "/garbage": ("garbage", b"SPDY/9 what is this\r\n\r\n"),
}
PLAIN_400 = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class RawUpstream:
    def __init__(self) -> None:
        self.paths: Counter[str] = Counter()  # HTTP requests received, by path
        self.tls_hellos = 0
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def spec(self, base_url: str | None = None) -> dict[str, Any]:
        ok = {"200": {"description": "whatever arrives"}}
        paths = {path: {"get": {"operationId": op, "responses": ok}} for path, (op, _) in ANSWERS.items()}
        return {
            "openapi": "3.0.3",
            "info": {"title": "raw", "version": "1"},
            "servers": [{"url": base_url or self.base_url}],
            "paths": paths,
        }

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            buf = b""
            try:
                while b"\r\n\r\n" not in buf and not buf.startswith(b"\x16") and len(buf) < 65536:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                if buf.startswith(b"\x16"):  # a TLS handshake record
                    with self.lock:
                        self.tls_hellos += 1
                    conn.sendall(PLAIN_400)
                    return
                path = buf.split(b" ", 2)[1].split(b"?")[0].decode()
                with self.lock:
                    self.paths[path] += 1
                conn.sendall(ANSWERS.get(path, ("", PLAIN_400))[1])
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                return

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the blocked accept(); close alone does not
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(timeout=10)
