"""A programmable HTTP upstream on loopback for the egress tests (RELIABILITY.md 0.3).

Stdlib ``ThreadingHTTPServer`` in a daemon thread on port 0. It counts accepted
connections (the "no stray egress" check, I-1) and records every request it answered.
Routes:

- ``.../echo...``    any method: JSON of method, raw path, headers and body as received
- ``/trickle``       declares 64 bytes, then sends one byte every 200 ms
- ``/big``           1 MiB body with Content-Length; ``/big-stream`` the same without it
- ``/bomb``          a small gzip body that inflates to 64 MiB of zeros
- ``/gzip``          a small gzip body that inflates to ``hello gzip``
- ``/redirect``      302 to the metadata address, with a token in the query
- ``/status/<n>``    status n with a JSON error body
"""

from __future__ import annotations

import contextlib
import datetime
import gzip
import json
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@cache
def bomb() -> bytes:
    return gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)


class RecordingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, keep_alive: bool = False) -> None:
        super().__init__((host, port), KeepAliveHandler if keep_alive else Handler)
        self.connections = 0
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def get_request(self) -> Any:
        pair = super().get_request()
        with self.lock:
            self.connections += 1
        return pair

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Handler(BaseHTTPRequestHandler):
    server: RecordingServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if "Content-Length" not in (headers or {}) and body is not None:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        record = {
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "header_list": list(self.headers.items()),
            "body": body.decode("utf-8", "replace"),
        }
        with self.server.lock:
            self.server.requests.append(record)
        path = self.path.split("?", 1)[0]
        # The client giving up mid-answer is what several tests are about.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._route(path, record)

    def _route(self, path: str, record: dict[str, Any]) -> None:
        if "/echo" in path:  # under any base path
            self._send(200, json.dumps(record).encode(), {"Content-Type": "application/json"})
        elif path == "/trickle":
            self.send_response(200)
            self.send_header("Content-Length", "64")
            self.end_headers()
            for _ in range(64):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.2)  # the slow server under test, not a wait in the test
        elif path == "/big":
            self._send(200, b"a" * (1024 * 1024), {"Content-Type": "text/plain"})
        elif path == "/big-stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()  # HTTP/1.0, no length: the body ends when the socket closes
            for _ in range(16):
                self.wfile.write(b"a" * 65536)
        elif path == "/bomb":
            self._send(200, bomb(), {"Content-Encoding": "gzip", "Content-Type": "text/plain"})
        elif path == "/set-cookie":  # what a session-minting API answers
            self._send(
                200, b"{}", {"Content-Type": "application/json", "Set-Cookie": "session=alice-secret; Path=/"}
            )
        elif path == "/gzip":
            self._send(200, gzip.compress(b"hello gzip"), {"Content-Encoding": "gzip"})
        elif path == "/redirect":
            self._send(302, b"", {"Location": "http://169.254.169.254/latest/meta-data/?token=SECRET"})
        elif path.startswith("/status/"):
            status = int(path.rsplit("/", 1)[1])
            body = json.dumps({"error": "nope"}).encode() if status != 204 else b""
            self._send(status, body, {"Content-Type": "application/json"})
        else:
            self._send(404, b"no route", {"Content-Type": "text/plain"})

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A throwaway certificate for ``name`` (its own CA): (cert file, key file)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


class KeepAliveHandler(Handler):
    """HTTP/1.1: the connection stays open between requests (the reuse tests count them)."""

    protocol_version = "HTTP/1.1"


@contextmanager
def serving(
    tls: tuple[Path, Path] | None = None, *, host: str = "127.0.0.1", port: int = 0, keep_alive: bool = False
) -> Iterator[RecordingServer]:
    server = RecordingServer(host, port, keep_alive=keep_alive)
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
