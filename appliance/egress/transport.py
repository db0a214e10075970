"""The one HTTP client every upstream call goes through: pinned, capped and on a deadline.

- ``PinnedTransport`` resolves and checks the host per request, then connects to the checked
  address itself (the ``Host`` header and TLS SNI keep the name), so DNS rebinding between
  check and connect is impossible (anchors A2, A4). The exchange is ``http1.py``'s.
- ``Egress.send`` puts a TOTAL deadline around the call with ``asyncio.timeout``:
  per-operation timeouts never trip on a server trickling one byte at a time (A6,
  encode/httpx#1450).
- The body is read raw and decoded with a bounded output (``bodies.py``), so a gzip bomb
  stops at the byte cap instead of being inflated in one read (A6, the urllib3 advisories).
- Redirects are never followed: a 3xx is an error naming where it pointed.

Every failure is an ``UpstreamError`` whose message a client may read: it names the host,
never the query string (credentials may live there), and never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from urllib.parse import quote, urlencode

import httpx

from appliance.config import Settings
from appliance.egress.bodies import decoder_for, from_httpx, iter_capped, kept_headers, read_capped
from appliance.egress.guard import EgressPolicy, Resolver, host_port
from appliance.egress.http1 import Answer, Body, Pool
from appliance.errors import UpstreamError

# httpx logs every request URL at INFO (a query-string API key included; and a line per
# upstream request doubled the log's cost per call) and httpcore logs response headers at
# DEBUG (an upstream may echo a credential there): below WARNING they would put secrets in
# the log, whatever TOOLSPOKE_LOG_LEVEL says (RELIABILITY VAULT-01).
for _chatty in ("httpx", "httpcore"):
    logging.getLogger(_chatty).setLevel(logging.WARNING)

# A service answered in process (``Egress.serve_locally``): (method, path and query, body)
# → (status, lower-case headers, body).
LocalService = Callable[[str, str, bytes], Awaitable[tuple[int, dict[str, str], bytes]]]

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


class PinnedTransport:
    """Resolve + check the host, then send to the checked IP with Host and SNI unchanged.

    Connections are kept alive per route, a route being (scheme, hostname, checked address,
    port): a pool keyed by (scheme, IP, port) only could hand a TLS connection opened and
    verified for one name to a request for another name on the same address (A3's pool-reuse
    hazard). A route's pool only ever serves its own name. Every request still resolves and
    checks the name first; when the answer changed, the routes to the old address are
    retired (closed once their last answer is read), so no request is sent to an address
    that was not checked for it. The HTTP/1.1 exchange itself is ``http1.py``'s.

    Not an httpx transport: building httpx's Request and Response objects (URL merging,
    header normalisation) was a tenth of a paid call's CPU for nothing we use; httpx stays
    the URL model and the error vocabulary.
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

    async def open(
        self,
        method: str,
        url: httpx.URL,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        connect_timeout_s: float | None,
    ) -> Answer:
        """Send one request to ``url``'s checked address; the answer with its head read.

        ``target`` is the request target (path and query) and ``headers`` carry Host. The
        caller must close ``answer.body`` (read or not) to hand the connection back.
        """
        if self._closed:
            raise RuntimeError("the egress transport is closed")
        host, port = host_port(url)
        addresses = await self.policy.resolve(host, port)
        route = self._route((url.scheme, host.lower(), str(addresses[0]), port))
        conn = await route.pool.acquire(connect_timeout_s)
        try:
            await conn.send(method, target, headers, body)
            status, _, answer_headers, framing, length = await conn.receive(method.encode("ascii"))
        except BaseException:
            conn.close()
            route.pool.release(conn)
            raise
        return Answer(status, answer_headers, Body(conn, framing, length, route.pool.release))

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
        self._local: dict[tuple[str, str, int], LocalService] = {}

    def check_url(self, url: str | httpx.URL, *, field: str = "url") -> httpx.URL:
        """Vet a URL at registration time (shape and literal addresses); see EgressPolicy."""
        return self.policy.check_url(url, field=field)

    def serve_locally(self, origin: str, service: LocalService) -> None:
        """Answer requests to exactly ``origin`` (scheme, host, port) with ``service``, in this
        process: no DNS, no socket, and no address opened in the guard (the demo API)."""
        self._local[_origin_of(httpx.URL(origin))] = service

    def is_local(self, url: str | httpx.URL) -> bool:
        """Whether ``url`` is answered in process (see ``serve_locally``)."""
        return bool(self._local) and _origin_of(self.policy.check_url(url)) in self._local

    async def _send_locally(
        self, service: LocalService, method: str, target: httpx.URL, path: bytes, body: bytes, cap: int
    ) -> HttpResponse:
        status, headers, data = await service(method, path.decode("ascii", "replace"), body)
        if len(data) > cap:
            raise UpstreamError(
                f"{target.host} answered more than {cap} bytes",
                reason="upstream_too_large",
                data={"max_bytes": cap},
            )
        return HttpResponse(status=status, headers=dict(headers), body=data, url=str(target))

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
        body = content or b""
        with _mapped_errors(host, deadline):
            path = _request_target(target, params)
            out_headers = _request_headers(target, headers, cookies)
            local = self._local.get(_origin_of(target)) if self._local else None
            if local is not None:
                return await self._send_locally(local, method, target, path, body, cap)
            async with asyncio.timeout(deadline):
                answer = await self._transport.open(method, target, path, out_headers, body, deadline)
                try:
                    if 300 <= answer.status < 400 and answer.status != 304:
                        raise _redirect(host, answer)
                    data = await read_capped(answer, cap, host)
                finally:
                    answer.body.close()
        return HttpResponse(status=answer.status, headers=kept_headers(answer), body=data, url=str(target))

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
        bounded = math.isfinite(deadline)
        with _mapped_errors(host, deadline):
            out_headers = _request_headers(target, headers, None)
            async with asyncio.timeout(deadline if bounded else None):
                answer = await self._transport.open(
                    method,
                    target,
                    target.raw_path,
                    out_headers,
                    content or b"",
                    deadline if bounded else self.timeout_s,
                )
                chunks: AsyncGenerator[bytes, None] | None = None
                try:
                    if 300 <= answer.status < 400 and answer.status != 304:
                        raise _redirect(host, answer)
                    chunks = iter_capped(answer, decoder_for(answer, cap, host), cap, host)
                    yield HttpStream(answer.status, kept_headers(answer), chunks, str(target))
                finally:
                    if chunks is not None:
                        await chunks.aclose()
                    answer.body.close()

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


def _origin_of(url: httpx.URL) -> tuple[str, str, int]:
    host, port = host_port(url)
    return url.scheme, host.lower(), port


# Headers a caller may not set: the connection's framing and routing are ours.
_OURS = frozenset({"host", "content-length", "transfer-encoding", "connection", "accept-encoding"})


def _request_target(url: httpx.URL, params: list[tuple[str, str]] | Mapping[str, str] | None) -> bytes:
    """Path and query of the request line, ``params`` appended to the URL's own query."""
    path = url.raw_path
    if not params:
        return path
    extra = urlencode(params, doseq=True).encode("ascii")
    return path + (b"&" if b"?" in path else b"?") + extra


def _request_headers(
    url: httpx.URL, given: Mapping[str, str] | None, cookies: Mapping[str, str] | None
) -> list[tuple[bytes, bytes]]:
    """Host and our defaults, the caller's headers over the defaults, cookies joined in.

    Accept-Encoding is always ours (only what we decode with a bounded output), and so are
    Host (the checked URL's) and the framing headers (the body is sent whole, with its
    length).
    """
    merged: dict[str, tuple[str, str]] = {
        "user-agent": ("User-Agent", USER_AGENT),
        "accept": ("Accept", "*/*"),
    }
    for name, value in (given or {}).items():
        if name.lower() not in _OURS:
            merged[name.lower()] = (name, value)
    if cookies:
        # Built by hand: a jar would keep state between calls of different toolkits.
        jar = "; ".join(f"{k}={quote(str(v), safe=_COOKIE_SAFE)}" for k, v in cookies.items())
        prior = merged.get("cookie")
        merged["cookie"] = ("Cookie", f"{prior[1]}; {jar}" if prior else jar)
    out = [(b"Host", url.netloc)]
    out += [(_encoded(name), _encoded(value)) for name, value in merged.values()]
    out.append((b"Accept-Encoding", ACCEPT_ENCODING.encode("ascii")))
    return out


def _encoded(text: str) -> bytes:
    try:
        return text.encode("ascii")
    except UnicodeEncodeError:
        return text.encode("utf-8")  # as httpx sent them; a server decides what it accepts


@contextmanager
def _mapped_errors(host: str, deadline: float) -> Iterator[None]:
    """Whatever fails inside, raised as what it means to the caller (``_as_upstream_error``)."""
    try:
        yield
    except Exception as exc:
        mapped = _as_upstream_error(exc, host, deadline)
        if mapped is exc:
            raise
        raise mapped from exc


def _as_upstream_error(exc: Exception, host: str, deadline: float) -> Exception:
    """What a failed exchange with ``host`` means to the caller (non-egress errors pass)."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return UpstreamError(f"{host} did not answer within {deadline:g} s", reason="upstream_timeout")
    if isinstance(exc, httpx.HTTPError):
        return from_httpx(host, exc)
    if isinstance(exc, OSError):  # a socket error the exchange did not wrap
        return UpstreamError(f"could not reach {host}", reason="upstream_unavailable")
    return exc


def _redirect(host: str, answer: Answer) -> UpstreamError:
    location = answer.header(b"location")
    try:
        # Name where it pointed, but not its query: that may carry a token.
        loc = httpx.URL(location)
        shown = str(loc.copy_with(query=None, fragment=None)) + ("?…" if loc.query else "")
    except httpx.InvalidURL:
        shown = "an invalid Location"
    shown = shown[:_MAX_LOCATION] if location else "(no Location)"
    return UpstreamError(
        f"{host} answered HTTP {answer.status} redirecting to {shown}; redirects are not followed",
        reason="upstream_redirect",
        data={"status": answer.status, "location": shown},
    )
