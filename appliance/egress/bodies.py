"""Answer bodies read under a byte cap, decoded (gzip, deflate) with a bounded output.

The body is read raw and decoded here, so a gzip bomb stops at the byte cap instead of being
inflated in one read (RELIABILITY UP-04, A6: the urllib3 advisories). A failure while
reading is an ``UpstreamError`` naming the host, like every egress failure.
"""

from __future__ import annotations

import ssl
import zlib
from collections.abc import AsyncGenerator

import httpx

from appliance.egress.http1 import Answer
from appliance.errors import UpstreamError


def from_httpx(host: str, exc: httpx.HTTPError) -> UpstreamError:
    if isinstance(exc, httpx.ConnectError) and is_tls(exc):
        return UpstreamError(f"TLS handshake with {host} failed", reason="upstream_tls")
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        # Raised only while connecting (http1.Pool), before a byte of the request is written.
        return UpstreamError(f"could not connect to {host}", reason="upstream_unavailable", sent=False)
    if isinstance(exc, httpx.ReadError | httpx.WriteError | httpx.CloseError):
        return UpstreamError(f"the connection to {host} was reset", reason="upstream_unavailable")
    if isinstance(exc, httpx.RemoteProtocolError):
        return UpstreamError(f"{host} broke the HTTP protocol or closed early", reason="upstream_invalid")
    if isinstance(exc, httpx.DecodingError):
        return UpstreamError(f"{host} sent a body that could not be decoded", reason="upstream_invalid")
    if isinstance(exc, httpx.LocalProtocolError):
        return UpstreamError(
            "the request could not be sent: an invalid header or body", reason="upstream_invalid", sent=False
        )
    return UpstreamError(f"the call to {host} failed", reason="upstream_unavailable")


def is_tls(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):  # walk the cause chain; httpcore wraps the ssl error
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLError | ssl.CertificateError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def too_large(host: str, cap: int) -> UpstreamError:
    return UpstreamError(
        f"the answer from {host} is larger than {cap} bytes",
        reason="upstream_too_large",
        data={"max_bytes": cap},
    )


class BoundedDecoder:
    """gzip/deflate decoding that never produces more than ``limit`` bytes."""

    def __init__(self, encoding: str, limit: int) -> None:
        self.encoding = encoding
        self.limit = limit
        self._wbits = 16 + zlib.MAX_WBITS if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self._d = zlib.decompressobj(self._wbits)
        self._started = False

    def feed(self, data: bytes) -> bytes:
        """Decoded bytes for ``data``; at most ``limit + 1`` of them, so overflow shows."""
        out = bytearray()
        while data and len(out) <= self.limit:
            try:
                out += self._d.decompress(data, self.limit + 1 - len(out))
            except zlib.error:
                if self._started or self.encoding != "deflate" or self._wbits < 0:
                    raise
                # Some servers send raw deflate without the zlib header.
                self._wbits = -zlib.MAX_WBITS
                self._d = zlib.decompressobj(self._wbits)
                continue
            self._started = True
            if self._d.eof:
                data = self._d.unused_data  # another gzip member follows
                self._d = zlib.decompressobj(self._wbits)
            else:
                data = self._d.unconsumed_tail
        return bytes(out)

    def finish(self) -> bytes:
        """Output zlib still holds after the last chunk (bounded like ``feed``)."""
        out = bytearray()
        while len(out) <= self.limit:
            more = self._d.decompress(self._d.unconsumed_tail, self.limit + 1 - len(out))
            if not more:
                break
            out += more
        return bytes(out)


def kept_headers(answer: Answer) -> dict[str, str]:
    """Lower-case names, repeated ones joined; the framing and encoding ones dropped, since
    the body handed on is already unframed and decoded."""
    out: dict[str, str] = {}
    for raw_name, raw_value in answer.headers:
        name = raw_name.decode("latin-1").lower()
        if name in ("content-encoding", "content-length", "transfer-encoding"):
            continue
        value = raw_value.decode("latin-1")
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def decoder_for(answer: Answer, cap: int, host: str) -> BoundedDecoder | None:
    """The bounded decoder the answer needs (None: identity); refuses what we cannot bound."""
    encodings = [e.strip().lower() for e in answer.header(b"content-encoding").split(",") if e.strip()]
    encodings = [e for e in encodings if e != "identity"]
    if len(encodings) > 1 or (encodings and encodings[0] not in ("gzip", "x-gzip", "deflate")):
        raise UpstreamError(
            f"{host} used an unsupported Content-Encoding {answer.header(b'content-encoding')!r}",
            reason="upstream_invalid",
        )
    declared = answer.header(b"content-length")
    if not encodings and declared.isdigit() and int(declared) > cap:
        raise too_large(host, cap)  # refuse before reading a byte
    return BoundedDecoder(encodings[0], cap) if encodings else None


async def iter_capped(
    answer: Answer, decoder: BoundedDecoder | None, cap: int, host: str
) -> AsyncGenerator[bytes, None]:
    """Decoded chunks of a streamed answer, failing once their total passes ``cap``."""
    total = 0
    try:
        async for chunk in answer.body:
            data = decoder.feed(chunk) if decoder else chunk
            total += len(data)
            if total > cap:
                raise too_large(host, cap)
            if data:
                yield data
        tail = decoder.finish() if decoder else b""
        if total + len(tail) > cap:
            raise too_large(host, cap)
        if tail:
            yield tail
    except zlib.error as exc:
        raise UpstreamError(
            f"{host} sent a body that could not be decoded", reason="upstream_invalid"
        ) from exc
    except httpx.TimeoutException as exc:
        raise UpstreamError(f"{host} stopped sending in time", reason="upstream_timeout") from exc
    except httpx.HTTPError as exc:
        raise from_httpx(host, exc) from exc


async def read_capped(answer: Answer, cap: int, host: str) -> bytes:
    """The whole body, decoded, failing once it passes ``cap``."""
    decoder = decoder_for(answer, cap, host)
    body = bytearray()
    try:
        async for chunk in answer.body:
            body += decoder.feed(chunk) if decoder else chunk
            if len(body) > cap:
                raise too_large(host, cap)
        if decoder:
            body += decoder.finish()
    except zlib.error as exc:
        raise UpstreamError(
            f"{host} sent a body that could not be decoded", reason="upstream_invalid"
        ) from exc
    if len(body) > cap:
        raise too_large(host, cap)
    return bytes(body)
