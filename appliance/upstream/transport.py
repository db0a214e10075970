"""The one HTTP client every upstream call goes through: pinned, capped and on a deadline.

- ``PinnedTransport`` resolves and checks the host per request, then connects to the checked
  address itself (URL host rewritten to the IP, ``Host`` header and TLS SNI kept), so DNS
  rebinding between check and connect is impossible (anchors A2, A4).
- ``Egress.send`` puts a TOTAL deadline around the call with ``asyncio.timeout``: httpx
  timeouts are per network operation, and a server trickling one byte at a time never trips
  them (A6, encode/httpx#1450).
- The body is read raw and decompressed here with a bounded output, so a gzip bomb stops at
  the byte cap instead of being inflated in one read (A6, the urllib3 advisories).
- Redirects are never followed: a 3xx is an error naming where it pointed.

Every failure is an ``UpstreamError`` whose message a client may read: it names the host,
never the query string (credentials may live there), and never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
import zlib
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from appliance.config import Settings
from appliance.errors import UpstreamError
from appliance.upstream.guard import EgressPolicy, Resolver, host_port
from appliance.upstream.http1 import Body, Pool

# httpx logs every request URL at INFO (a query-string API key included; and a line per
# upstream request doubled the log's cost per call) and httpcore logs response headers at
# DEBUG (an upstream may echo a credential there): below WARNING they would put secrets in
# the log, whatever TOOLSPOKE_LOG_LEVEL says (RELIABILITY VAULT-01).
for _chatty in ("httpx", "httpcore"):
    logging.getLogger(_chatty).setLevel(logging.WARNING)

USER_AGENT = "toolspoke/0.1"
# Only encodings we can decode with a bounded output; the caller cannot widen this.
ACCEPT_ENCODING = "gzip, deflate"
_MAX_LOCATION = 200
# Kept-alive connections: routes (hostname + checked address) remembered; idle connections
# kept per route (taking one is a pop, so many cost nothing per call, and at 50 concurrent
# callers fewer meant a new TCP connection for most calls) and in the whole process (file
# descriptors); connections open per route at most (more callers wait for one); and how
# long an idle one is kept: below the 5 s idle timeout of Node and uvicorn servers, so we
# do not send on a connection the server is closing.
MAX_ROUTES = 64
KEEPALIVE_PER_ROUTE = 64
MAX_IDLE_TOTAL = 256
MAX_OPEN_PER_ROUTE = 100
KEEPALIVE_EXPIRY_S = 3.0
# cookie-octet characters (RFC 6265) kept as they are; everything else is percent-encoded.
_COOKIE_SAFE = "!#$&'()*+-./:<=>?@[]^_`{|}~"


@dataclass(frozen=True)
class HttpResponse:
    """An upstream answer with its body fully read and decoded (at most the byte cap).

    ``headers`` has lower-case names (repeated headers joined with ", "); Content-Encoding
    and Content-Length are dropped because ``body`` is already decoded.
    """

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    url: str = ""

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


@dataclass(frozen=True)
class HttpStream:
    """An upstream answer whose body is still arriving (see ``Egress.stream``).

    ``chunks`` yields decoded bytes; together they never exceed the stream's byte cap, and
    a failure while reading raises UpstreamError like ``Egress.send`` does.
    """

    status: int
    headers: dict[str, str]
    chunks: AsyncIterator[bytes]
    url: str = ""

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    async def read(self) -> bytes:
        """The rest of the body (still under the cap)."""
        body = bytearray()
        async for chunk in self.chunks:
            body += chunk
        return bytes(body)


class _Route:
    """Keep-alive connections to one checked address, for one hostname only."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.retired = False


class PinnedTransport(httpx.AsyncBaseTransport):
    """Resolve + check the host, then send to the checked IP with Host and SNI unchanged.

    Connections are kept alive per route, a route being (scheme, hostname, checked address,
    port): a pool keyed by (scheme, IP, port) only could hand a TLS connection opened and
    verified for one name to a request for another name on the same address (A3's pool-reuse
    hazard). A route's pool only ever serves its own name. Every request still resolves and
    checks the name first; when the answer changed, the routes to the old address are
    retired (closed once their last answer is read), so no request is sent to an address
    that was not checked for it. The HTTP/1.1 exchange itself is ``http1.py``'s.
    """

    def __init__(
        self, policy: EgressPolicy, *, verify: ssl.SSLContext | bool = True, max_routes: int = MAX_ROUTES
    ) -> None:
        self.policy = policy
        # One TLS context for every route: building one loads the CA bundle (milliseconds).
        self._ssl = (
            verify
            if isinstance(verify, ssl.SSLContext)
            else httpx.create_ssl_context(verify=verify, trust_env=False)
        )
        self._max_routes = max_routes
        self._routes: OrderedDict[tuple[str, str, str, int], _Route] = OrderedDict()
        self._spare = [MAX_IDLE_TOTAL]  # idle connections the process may still keep
        self._closed = False

    def _route(self, key: tuple[str, str, str, int]) -> _Route:
        """The route for ``key`` (made on first use); retires the routes it makes stale."""
        route = self._routes.get(key)
        if route is None:
            stale = [k for k in self._routes if k != key and (k[0], k[1], k[3]) == (key[0], key[1], key[3])]
            for k in stale:
                self._retire(self._routes.pop(k))
            scheme, host, address, port = key
            route = _Route(
                Pool(
                    address=address,
                    port=port,
                    tls=self._ssl if scheme == "https" else None,
                    sni=host,
                    keep=KEEPALIVE_PER_ROUTE,
                    expiry_s=KEEPALIVE_EXPIRY_S,
                    max_open=MAX_OPEN_PER_ROUTE,
                    spare=self._spare,
                )
            )
            self._routes[key] = route
            while len(self._routes) > self._max_routes:
                self._retire(self._routes.popitem(last=False)[1])
        else:
            self._routes.move_to_end(key)
        return route

    @staticmethod
    def _retire(route: _Route) -> None:
        route.retired = True
        route.pool.close()  # idle ones now; busy ones as their answers are closed

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the egress transport is closed")
        url = request.url
        host, port = host_port(url)
        addresses = await self.policy.resolve(host, port)
        route = self._route((url.scheme, host.lower(), str(addresses[0]), port))
        body = await request.aread()
        timeouts = request.extensions.get("timeout") or {}
        conn = await route.pool.acquire(timeouts.get("connect"))
        try:
            await conn.send(request, body)
            status, reason, headers, framing, length = await conn.receive(request.method.encode("ascii"))
        except BaseException:
            conn.close()
            route.pool.release(conn)
            raise
        return httpx.Response(
            status,
            headers=headers,
            stream=Body(conn, framing, length, route.pool.release),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
        )

    async def aclose(self) -> None:
        self._closed = True
        routes = list(self._routes.values())
        self._routes.clear()
        for route in routes:
            self._retire(route)


class Egress:
    """The process-wide upstream HTTP client (one per process; close with ``aclose``)."""

    def __init__(
        self,
        policy: EgressPolicy | Settings | None = None,
        *,
        timeout_s: float | None = None,
        max_bytes: int | None = None,
        resolver: Resolver | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        """From Settings (ALLOWED_TOOL_CIDRS, timeout, byte cap) or an explicit policy.

        Explicit ``timeout_s``/``max_bytes`` win over the settings; ``resolver`` is for tests.
        """
        if isinstance(policy, Settings):
            timeout_s = policy.upstream_timeout_s if timeout_s is None else timeout_s
            max_bytes = policy.upstream_max_bytes if max_bytes is None else max_bytes
            policy = EgressPolicy(policy.allowed_tool_cidrs, resolver=resolver)
        self.policy = policy or EgressPolicy(resolver=resolver)
        self.timeout_s = 30.0 if timeout_s is None else timeout_s
        self.max_bytes = 262144 if max_bytes is None else max_bytes
        # Requests go straight to the pinned transport, not through httpx.AsyncClient: the
        # client's layers (auth and redirect generators, URL merging) cost CPU on every call
        # for features we refuse anyway (no redirects, no proxies from the environment), and
        # its cookie jar would keep a Set-Cookie from one upstream answer and send it with
        # the next request to that host: another toolkit's, another user's call.
        self._transport = PinnedTransport(self.policy, verify=verify)

    def check_url(self, url: str | httpx.URL, *, field: str = "url") -> httpx.URL:
        """Vet a URL at registration time (shape and literal addresses); see EgressPolicy."""
        return self.policy.check_url(url, field=field)

    def allow_self(self, base_url: str) -> None:
        """Let calls reach the appliance's own address and port (the built-in demo API)."""
        host, port = host_port(httpx.URL(base_url))
        self.policy.allow_endpoint(host, port)

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> Egress:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def send(
        self,
        method: str,
        url: str | httpx.URL,
        *,
        params: list[tuple[str, str]] | Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        cookies: Mapping[str, str] | None = None,
        content: bytes | None = None,
        json: Any = None,
        data: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        max_bytes: int | None = None,
    ) -> HttpResponse:
        """Send one request and read the whole (decoded, capped) answer.

        A non-3xx status of any kind is returned, not raised: what a 404 means is the
        caller's business. Raises UpstreamError for everything else.
        """
        target = self.policy.check_url(url)
        deadline = self.timeout_s if timeout_s is None else timeout_s
        cap = self.max_bytes if max_bytes is None else max_bytes
        host = target.host
        out_headers = _headers(headers)
        if cookies:
            # Built by hand: httpx deprecates per-request cookies, and a jar would keep
            # state between calls of different toolkits.
            jar = "; ".join(f"{k}={quote(str(v), safe=_COOKIE_SAFE)}" for k, v in cookies.items())
            prior = out_headers.get("Cookie")
            out_headers["Cookie"] = f"{prior}; {jar}" if prior else jar
        try:
            async with asyncio.timeout(deadline):
                request = httpx.Request(
                    method,
                    target,
                    params=httpx.QueryParams(urlencode(params, doseq=True)) if params else None,
                    headers=out_headers,
                    content=content,
                    json=json,
                    data=data,
                    extensions={"timeout": httpx.Timeout(deadline).as_dict()},
                )
                response = await self._exchange(request)
                try:
                    if 300 <= response.status_code < 400 and response.status_code != 304:
                        raise _redirect(host, response)
                    body = await _read_capped(response, cap, host)
                finally:
                    await response.aclose()
        except Exception as exc:
            mapped = _as_upstream_error(exc, host, deadline)
            if mapped is exc:
                raise
            raise mapped from exc
        return HttpResponse(status=response.status_code, headers=_kept(response), body=body, url=str(target))

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        url: str | httpx.URL,
        *,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        timeout_s: float | None = None,
        max_bytes: int | None = None,
    ) -> AsyncIterator[HttpStream]:
        """Send one request and hand over the answer as it arrives (SSE, long answers).

        Same guard, redirect refusal and decoding as ``send``. The deadline covers
        everything up to leaving the ``async with`` block, reading included;
        ``timeout_s=math.inf`` means no total deadline and no idle read timeout (a
        long-lived event stream, whose owner enforces its own limits). ``max_bytes`` caps
        the whole body.
        """
        target = self.policy.check_url(url)
        deadline = self.timeout_s if timeout_s is None else timeout_s
        cap = self.max_bytes if max_bytes is None else max_bytes
        host = target.host
        out_headers = _headers(headers)
        bounded = math.isfinite(deadline)
        per_operation = httpx.Timeout(deadline) if bounded else httpx.Timeout(self.timeout_s, read=None)
        try:
            async with asyncio.timeout(deadline if bounded else None):
                request = httpx.Request(
                    method,
                    target,
                    headers=out_headers,
                    content=content,
                    extensions={"timeout": per_operation.as_dict()},
                )
                response = await self._exchange(request)
                chunks: AsyncGenerator[bytes, None] | None = None
                try:
                    if 300 <= response.status_code < 400 and response.status_code != 304:
                        raise _redirect(host, response)
                    chunks = _iter_capped(response, _decoder_for(response, cap, host), cap, host)
                    yield HttpStream(response.status_code, _kept(response), chunks, str(target))
                finally:
                    if chunks is not None:
                        await chunks.aclose()
                    await response.aclose()
        except Exception as exc:
            mapped = _as_upstream_error(exc, host, deadline)
            if mapped is exc:
                raise
            raise mapped from exc

    async def _exchange(self, request: httpx.Request) -> httpx.Response:
        response = await self._transport.handle_async_request(request)
        response.request = request
        return response

    async def fetch_document(
        self, url: str, max_bytes: int | None = None, *, timeout_s: float | None = None
    ) -> bytes:
        """GET a document (an OpenAPI spec for ``import openapi URL``) under the same guard.

        Returns the decoded body. An HTTP error status is a failure here: reason
        upstream_unavailable, with the status in ``data``.
        """
        response = await self.send(
            "GET",
            url,
            headers={"Accept": "application/json, application/yaml, text/yaml, */*;q=0.5"},
            timeout_s=timeout_s,
            max_bytes=max_bytes,
        )
        if response.status >= 400:
            host = httpx.URL(response.url).host
            raise UpstreamError(
                f"{host} answered HTTP {response.status} for the document",
                reason="upstream_unavailable",
                data={"status": response.status},
            )
        return response.body


def _headers(given: Mapping[str, str] | None) -> httpx.Headers:
    """The caller's headers over our defaults; Accept-Encoding is always ours."""
    out = httpx.Headers({"User-Agent": USER_AGENT, "Accept": "*/*"})
    out.update(given or {})
    out["Accept-Encoding"] = ACCEPT_ENCODING
    return out


def _as_upstream_error(exc: Exception, host: str, deadline: float) -> Exception:
    """What a failed exchange with ``host`` means to the caller (non-egress errors pass)."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return UpstreamError(f"{host} did not answer within {deadline:g} s", reason="upstream_timeout")
    if isinstance(exc, httpx.HTTPError):
        return _from_httpx(host, exc)
    if isinstance(exc, OSError):  # a socket error httpcore did not wrap
        return UpstreamError(f"could not reach {host}", reason="upstream_unavailable")
    return exc


def _redirect(host: str, response: httpx.Response) -> UpstreamError:
    location = response.headers.get("location", "")
    try:
        # Name where it pointed, but not its query: that may carry a token.
        loc = httpx.URL(location)
        shown = str(loc.copy_with(query=None, fragment=None)) + ("?…" if loc.query else "")
    except httpx.InvalidURL:
        shown = "an invalid Location"
    shown = shown[:_MAX_LOCATION] if location else "(no Location)"
    return UpstreamError(
        f"{host} answered HTTP {response.status_code} redirecting to {shown}; redirects are not followed",
        reason="upstream_redirect",
        data={"status": response.status_code, "location": shown},
    )


def _from_httpx(host: str, exc: httpx.HTTPError) -> UpstreamError:
    if isinstance(exc, httpx.ConnectError) and _is_tls(exc):
        return UpstreamError(f"TLS handshake with {host} failed", reason="upstream_tls")
    if isinstance(exc, httpx.ConnectError | httpx.ReadError | httpx.WriteError | httpx.CloseError):
        return UpstreamError(
            f"could not reach {host} (connection refused or reset)", reason="upstream_unavailable"
        )
    if isinstance(exc, httpx.RemoteProtocolError):
        return UpstreamError(f"{host} broke the HTTP protocol or closed early", reason="upstream_invalid")
    if isinstance(exc, httpx.DecodingError):
        return UpstreamError(f"{host} sent a body that could not be decoded", reason="upstream_invalid")
    if isinstance(exc, httpx.LocalProtocolError):
        return UpstreamError(
            "the request could not be sent: an invalid header or body", reason="upstream_invalid"
        )
    return UpstreamError(f"the call to {host} failed", reason="upstream_unavailable")


def _is_tls(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):  # walk the cause chain; httpcore wraps the ssl error
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLError | ssl.CertificateError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _too_large(host: str, cap: int) -> UpstreamError:
    return UpstreamError(
        f"the answer from {host} is larger than {cap} bytes",
        reason="upstream_too_large",
        data={"max_bytes": cap},
    )


class _BoundedDecoder:
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


def _kept(response: httpx.Response) -> dict[str, str]:
    return {
        k: ", ".join(response.headers.get_list(k))
        for k in response.headers
        if k not in ("content-encoding", "content-length", "transfer-encoding")
    }


def _decoder_for(response: httpx.Response, cap: int, host: str) -> _BoundedDecoder | None:
    """The bounded decoder the answer needs (None: identity); refuses what we cannot bound."""
    encodings = [
        e.strip().lower() for e in response.headers.get("content-encoding", "").split(",") if e.strip()
    ]
    encodings = [e for e in encodings if e != "identity"]
    if len(encodings) > 1 or (encodings and encodings[0] not in ("gzip", "x-gzip", "deflate")):
        raise UpstreamError(
            f"{host} used an unsupported Content-Encoding {response.headers['content-encoding']!r}",
            reason="upstream_invalid",
        )
    declared = response.headers.get("content-length", "")
    if not encodings and declared.isdigit() and int(declared) > cap:
        raise _too_large(host, cap)  # refuse before reading a byte
    return _BoundedDecoder(encodings[0], cap) if encodings else None


async def _iter_capped(
    response: httpx.Response, decoder: _BoundedDecoder | None, cap: int, host: str
) -> AsyncGenerator[bytes, None]:
    """Decoded chunks of a streamed answer, failing once their total passes ``cap``."""
    total = 0
    try:
        async for chunk in response.aiter_raw():
            data = decoder.feed(chunk) if decoder else chunk
            total += len(data)
            if total > cap:
                raise _too_large(host, cap)
            if data:
                yield data
        tail = decoder.finish() if decoder else b""
        if total + len(tail) > cap:
            raise _too_large(host, cap)
        if tail:
            yield tail
    except zlib.error as exc:
        raise UpstreamError(
            f"{host} sent a body that could not be decoded", reason="upstream_invalid"
        ) from exc
    except httpx.TimeoutException as exc:
        raise UpstreamError(f"{host} stopped sending in time", reason="upstream_timeout") from exc
    except httpx.HTTPError as exc:
        raise _from_httpx(host, exc) from exc


async def _read_capped(response: httpx.Response, cap: int, host: str) -> bytes:
    decoder = _decoder_for(response, cap, host)
    body = bytearray()
    try:
        async for chunk in response.aiter_raw():
            body += decoder.feed(chunk) if decoder else chunk
            if len(body) > cap:
                raise _too_large(host, cap)
        if decoder:
            body += decoder.finish()
    except zlib.error as exc:
        raise UpstreamError(
            f"{host} sent a body that could not be decoded", reason="upstream_invalid"
        ) from exc
    if len(body) > cap:
        raise _too_large(host, cap)
    return bytes(body)
