"""MCP over HTTP, upstream side: streamable HTTP, legacy HTTP+SSE, and the choice between them.

Every byte goes through ``Egress`` (SSRF guard with pinned addresses, deadline, byte cap).

- ``StreamableHttpTransport``: one POST per message; the answer is JSON or an SSE stream
  scoped to that request (2026-07-28 and 2025-era streamable HTTP). 2025 era: the
  ``Mcp-Session-Id`` from ``initialize`` rides on every later request, a 404 with it raises
  ``SessionExpired`` (the session re-initialises once), ``DELETE`` on close. Also 2025 era
  only: a request's SSE stream that closes before the answer, after an event with an
  ``id``, is resumed with ``GET`` + ``Last-Event-ID`` after the ``retry`` wait, a few times
  at most and within the request's deadline (2025-11-25 transports, "Resumability and
  Redelivery"); the POST is never resent. 2026-07-28 has no resumption: the request is lost.
- ``LegacySseTransport``: 2024-11-05 HTTP+SSE: a long-lived GET stream whose first event
  names the POST endpoint (same origin only, else ``ssrf_blocked``).
- ``connect_http``: streamable HTTP first; when even ``initialize`` is refused with
  400/404/405 and no JSON-RPC body, legacy SSE on the same URL (2025-11-25 transports,
  "Backwards Compatibility").

Caller headers (Bearer, API key) are sent as given and never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import sys
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import orjson

from appliance.egress.transport import Egress, HttpStream
from appliance.errors import UpstreamError
from appliance.mcpclient.session import McpSession, Refused, RequestId, SessionExpired
from appliance.protocol import param_headers
from appliance.protocol.meta import PROTOCOL_VERSION_KEY
from appliance.protocol.routing import METHOD_HEADER, NAME_HEADER, SESSION_HEADER, VERSION_HEADER

log = logging.getLogger(__name__)

ACCEPT_BOTH = "application/json, text/event-stream"
_CLOSE_S = 5.0  # DELETE on close and other courtesy calls: never hold shutdown longer
_LINE_END = re.compile(rb"\r\n|\r|\n")
_SESSION_ID = re.compile(r"[\x21-\x7e]{1,256}")  # visible ASCII (2025-11-25 session ids)
_EVENT_ID = re.compile(r"[\x20-\x7e]{1,1024}")  # what we send back as Last-Event-ID
_RESUME_ATTEMPTS = 3  # GET reconnects per request stream, at most
_DEFAULT_RETRY_MS = 1000  # no ``retry`` field seen: the usual EventSource reconnection time
_AUTH_ROUNDS = 4  # sends of one message at most while its credential answers challenges


class HttpAuth(Protocol):
    """A credential that answers challenges (``oauthclient.connector.OAuthConnector``).

    ``headers`` are added to every request (its method and URL: a DPoP proof names both); on a
    401 or 403 the transport hands over the status, the ``WWW-Authenticate`` header, the
    headers it had sent and the answer's ``DPoP-Nonce`` (RFC 9449 §9), and sends the request
    again when ``challenged`` answers True (a refused request did not act upstream).
    """

    async def headers(self, method: str, url: str) -> dict[str, str]: ...

    async def challenged(
        self, status: int, www_authenticate: str | None, sent: dict[str, str], dpop_nonce: str | None = None
    ) -> bool: ...


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: bytes


class SseDecoder:
    """Incremental ``text/event-stream`` parser with a per-event byte cap.

    The cap is ours (the egress cap, well above 1 MiB if configured so): unlike the SDK
    client's fixed 1 MiB limit, a large tool result in one event is fine up to it.


    ``last_event_id`` and ``retry_ms`` follow the SSE rules: the id of the last dispatched
    event (an event without ``id`` keeps the previous one, the empty priming event counts)
    and the last valid ``retry`` field; pass them on to the decoder of a resumed stream.
    """

    def __init__(
        self,
        max_event_bytes: int,
        host: str = "the upstream",
        *,
        last_event_id: str = "",
        retry_ms: int | None = None,
    ) -> None:
        self.max_event_bytes = max_event_bytes
        self.host = host
        self.last_event_id = last_event_id
        self.retry_ms = retry_ms
        self._id_buffer = last_event_id
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already known to hold no line end
        self._skip_lf = False  # a CR ended the last chunk: a following LF belongs to it
        self._event = ""
        self._data: list[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> list[SseEvent]:
        events: list[SseEvent] = []
        if self._skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._skip_lf = False
        self._buf += chunk
        pos = 0
        while (match := _LINE_END.search(self._buf, max(pos, self._scanned))) is not None:
            if match.group() == b"\r" and match.end() == len(self._buf):
                self._skip_lf = True
            self._line(bytes(self._buf[pos : match.start()]), events)
            pos = match.end()
            self._scanned = 0
        del self._buf[:pos]
        self._scanned = len(self._buf)
        if self._size + len(self._buf) > self.max_event_bytes:
            raise self._too_large()
        return events

    def _line(self, line: bytes, events: list[SseEvent]) -> None:
        if not line:
            self.last_event_id = self._id_buffer
            data = b"\n".join(self._data)
            if data:  # an empty data buffer dispatches nothing (the SSE priming event)
                events.append(SseEvent(self._event or "message", data))
            self._event, self._data, self._size = "", [], 0
            return
        if line.startswith(b":"):
            return  # a comment (keep-alive)
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._size += len(value) + 1
            if self._size > self.max_event_bytes:
                raise self._too_large()
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id" and b"\0" not in value:
            self._id_buffer = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():
            self.retry_ms = int(value)

    def _too_large(self) -> UpstreamError:
        return UpstreamError(
            f"an event from {self.host} is larger than {self.max_event_bytes} bytes",
            reason="upstream_too_large",
            data={"max_bytes": self.max_event_bytes},
        )


def _read_cap(egress: Egress, toolkit_cap: int | None) -> int:
    # A toolkit cap above the setting lets larger messages in; one below it is checked on
    # the call's result (McpPool), so tools/list and the handshake keep the setting's room.
    return max(egress.max_bytes, toolkit_cap or 0)


def _parse(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return data  # not JSON: the session fails the request it belongs to


class StreamableHttpTransport:
    """MCP streamable HTTP through the egress guard (one POST per message)."""

    inline_answers = True
    request_scoped = True
    mirrors_headers = True  # SEP-2243: x-mcp-header arguments travel as Mcp-Param-* headers

    def __init__(
        self,
        egress: Egress,
        url: str,
        headers: dict[str, str] | None = None,
        *,
        max_bytes: int | None = None,
        auth: HttpAuth | None = None,
    ) -> None:
        self.egress = egress
        self.auth = auth
        # Parsed and vetted once; the egress client checks it again per request (cheaply: an
        # httpx.URL is not parsed twice) and resolves its host again every time.
        self.target = egress.check_url(url)
        self.url = str(self.target)
        self.host = self.target.host
        self.headers = dict(headers or {})
        self.max_bytes = _read_cap(egress, max_bytes)
        self.session_id: str | None = None
        self._legacy_version: str | None = None
        self._session: McpSession | None = None

    async def start(self, session: McpSession) -> None:
        self._session = session

    def negotiated(self, version: str, *, modern: bool) -> None:
        self._legacy_version = None if modern else version

    def _headers(self, message: dict[str, Any]) -> dict[str, str]:
        out = {**self.headers, "Accept": ACCEPT_BOTH, "Content-Type": "application/json"}
        params: dict[str, Any] = message.get("params") or {}
        meta: dict[str, Any] = params.get("_meta") or {}
        version = meta.get(PROTOCOL_VERSION_KEY)
        if isinstance(version, str):
            # Modern: the request metadata headers mirror the body (streamable-http.mdx).
            out[VERSION_HEADER] = version
            out[METHOD_HEADER] = str(message.get("method", ""))
            name = params.get("name", params.get("uri"))
            if isinstance(name, str):
                out[NAME_HEADER] = param_headers.encode(name)
            if self._session is not None and "id" in message:
                out.update(self._session.headers_for(message["id"]))  # SEP-2243 Mcp-Param-*
            return out
        if self._legacy_version:
            out[VERSION_HEADER] = self._legacy_version
        if self.session_id:
            out[SESSION_HEADER] = self.session_id
        return out

    async def send(self, message: dict[str, Any], *, timeout_s: float | None = None) -> None:
        if self._session is None:
            raise RuntimeError("start() the transport first")
        session = self._session
        content = orjson.dumps(message)
        for _ in range(_AUTH_ROUNDS):
            headers = self._headers(message)
            if self.auth is not None:
                headers.update(await self.auth.headers("POST", self.url))
            refused = await self._post(message, headers, content, session, timeout_s)
            if refused is None:
                return
            status, www_authenticate, dpop_nonce = refused
            assert self.auth is not None
            if not await self.auth.challenged(status, www_authenticate, headers, dpop_nonce):
                raise UpstreamError(
                    f"{self.host} rejected the credentials (HTTP {status})",
                    reason="upstream_unavailable",
                    data={"status": status},
                )
        raise UpstreamError(
            f"{self.host} kept rejecting the credentials after {_AUTH_ROUNDS} attempts",
            reason="upstream_unavailable",
        )

    async def _post(
        self,
        message: dict[str, Any],
        headers: dict[str, str],
        content: bytes,
        session: McpSession,
        timeout_s: float | None,
    ) -> tuple[int, str | None, str | None] | None:
        """One POST of ``message``; (status, challenge, DPoP nonce) when the credential must answer."""
        is_request = "method" in message and "id" in message
        origin: RequestId | None = message["id"] if is_request else None
        legacy_request = SESSION_HEADER in headers
        # 2025 era only (no modern metadata header): a broken request stream may be resumed.
        resumable = is_request and METHOD_HEADER not in headers
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.egress.timeout_s if timeout_s is None else timeout_s)
        broken: SseDecoder | None = None
        async with self.egress.stream(
            "POST",
            self.target,
            headers=headers,
            content=content,
            timeout_s=timeout_s,
            max_bytes=self.max_bytes,
        ) as answer:
            status = answer.status
            if status == 404 and legacy_request:
                self.session_id = None
                raise SessionExpired(f"{self.host} no longer knows our session (HTTP 404)")
            if status in (401, 403) and self.auth is not None:
                return status, answer.headers.get("www-authenticate"), answer.headers.get("dpop-nonce")
            if status >= 400:
                await self._refusal(answer, origin, session)
                return None
            if not is_request:
                return None  # a notification or a reply: 202 and nothing to read
            if status == 202:
                raise UpstreamError(
                    f"{self.host} accepted a request without answering it", reason="upstream_invalid"
                )
            if message.get("method") == "initialize":
                self._keep_session_id(answer)
            kind = answer.content_type.split(";")[0].strip().lower()
            if kind == "application/json":
                body = _parse(await answer.read())
                for item in body if isinstance(body, list) else [body]:
                    session.deliver(item, origin)
            elif kind == "text/event-stream":
                decoder = SseDecoder(self.max_bytes, self.host)
                if not await self._read_events(answer, decoder, origin, session, resumable=resumable):
                    broken = decoder if resumable else None
            else:
                raise UpstreamError(
                    f"{self.host} answered with content type {kind[:60]!r}", reason="upstream_invalid"
                )
        if broken is not None:  # the POST's connection is closed by now
            await self._resume(broken, origin, session, deadline)
        return None

    async def _read_events(
        self,
        answer: HttpStream,
        decoder: SseDecoder,
        origin: RequestId | None,
        session: McpSession,
        *,
        resumable: bool,
    ) -> bool:
        """Deliver the stream's messages; True once the answer came (the stream is done).

        False when the stream ended first. With ``resumable``, a broken connection also
        ends it that way (the caller may resume); otherwise its UpstreamError propagates.
        """
        try:
            async for chunk in answer.chunks:
                for event in decoder.feed(chunk):
                    if event.event != "message":
                        continue
                    message = _parse(event.data)
                    session.deliver(message, origin)
                    if isinstance(message, dict) and "method" not in message:
                        return True  # the answer ends the request's stream; stop reading here
        except UpstreamError as exc:
            if not (resumable and exc.reason == "upstream_unavailable" and decoder.last_event_id):
                raise
            log.debug("the event stream from %s broke: %s", self.host, exc.reason)
        return False

    async def _resume(
        self, decoder: SseDecoder, origin: RequestId | None, session: McpSession, deadline: float
    ) -> None:
        """GET + Last-Event-ID until the answer arrives (2025 era; SEP-1699 polling).

        Returns without the answer when there is nothing to resume from or the server does
        not resume (405, no event stream): the session then fails the request as before.
        Never resends the request itself.
        """
        loop = asyncio.get_running_loop()
        for _ in range(_RESUME_ATTEMPTS):
            last_id = decoder.last_event_id
            if not _EVENT_ID.fullmatch(last_id):
                return  # no (usable) event id: the stream cannot be resumed
            retry_ms = _DEFAULT_RETRY_MS if decoder.retry_ms is None else decoder.retry_ms
            if loop.time() + retry_ms / 1000 >= deadline:
                raise UpstreamError(
                    f"{self.host} closed the event stream and asked for a {retry_ms} ms wait "
                    "before resuming, past the request's deadline",
                    reason="upstream_timeout",
                )
            await asyncio.sleep(retry_ms / 1000)
            headers = {**self.headers, "Accept": "text/event-stream", "Last-Event-ID": last_id}
            if self.auth is not None:
                headers.update(await self.auth.headers("GET", self.url))
            if self._legacy_version:
                headers[VERSION_HEADER] = self._legacy_version
            if self.session_id:
                headers[SESSION_HEADER] = self.session_id
            decoder = SseDecoder(self.max_bytes, self.host, last_event_id=last_id, retry_ms=decoder.retry_ms)
            remaining = max(0.001, deadline - loop.time())
            async with self.egress.stream(
                "GET", self.target, headers=headers, timeout_s=remaining, max_bytes=self.max_bytes
            ) as answer:
                kind = answer.content_type.split(";")[0].strip().lower()
                if answer.status != 200 or kind != "text/event-stream":
                    log.debug("%s did not resume the event stream (HTTP %s)", self.host, answer.status)
                    return
                if await self._read_events(answer, decoder, origin, session, resumable=True):
                    return
        log.debug("%s closed the event stream %d times; giving up", self.host, _RESUME_ATTEMPTS + 1)

    async def _refusal(self, answer: HttpStream, origin: RequestId | None, session: McpSession) -> None:
        """A 4xx/5xx: a JSON-RPC error body is the answer; otherwise an UpstreamError."""
        status = answer.status
        body: Any = None
        if answer.content_type.lower().startswith("application/json"):
            with contextlib.suppress(UpstreamError):
                body = _parse(await answer.read())
        if origin is not None and isinstance(body, dict) and isinstance(body.get("error"), dict):
            if body.get("id") is None:
                body = {**body, "id": origin}  # rejected before its id was read: still ours
            session.deliver(body, origin)
            return
        if status in (400, 404, 405):
            raise Refused(f"{self.host} refused the message (HTTP {status})", status=status)
        if status in (401, 403):
            text = f"{self.host} rejected the credentials (HTTP {status})"
        else:
            text = f"{self.host} answered HTTP {status}"
        raise UpstreamError(text, reason="upstream_unavailable", data={"status": status})

    def _keep_session_id(self, answer: HttpStream) -> None:
        value = answer.headers.get(SESSION_HEADER.lower())
        if value is None:
            return
        if not _SESSION_ID.fullmatch(value):
            raise UpstreamError(f"{self.host} sent an invalid session id", reason="upstream_invalid")
        self.session_id = value

    async def aclose(self) -> None:
        session_id, self.session_id = self.session_id, None
        if not session_id:
            return
        headers = {**self.headers, SESSION_HEADER: session_id}
        if self.auth is not None:
            with contextlib.suppress(UpstreamError):
                headers.update(await self.auth.headers("DELETE", self.url))
        if self._legacy_version:
            headers[VERSION_HEADER] = self._legacy_version
        try:
            await self.egress.send("DELETE", self.target, headers=headers, timeout_s=_CLOSE_S)
        except UpstreamError as exc:  # the server may be gone already; the session is over
            log.debug("DELETE of the upstream session failed: %s", exc.reason)


class LegacySseTransport:
    """The 2024-11-05 HTTP+SSE transport: answers arrive on one long-lived GET stream."""

    inline_answers = False
    request_scoped = False

    def __init__(
        self,
        egress: Egress,
        url: str,
        headers: dict[str, str] | None = None,
        *,
        timeout_s: float = 30,
        max_bytes: int | None = None,
    ) -> None:
        self.egress = egress
        self.url = str(egress.check_url(url))
        self.host = httpx.URL(self.url).host
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        self.max_bytes = _read_cap(egress, max_bytes)
        self.endpoint: str | None = None
        self._reader: asyncio.Task[None] | None = None

    def negotiated(self, version: str, *, modern: bool) -> None:
        pass  # 2024-11-05 has no version header

    async def start(self, session: McpSession) -> None:
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.get_running_loop().create_task(self._read(session, ready))
        try:
            async with asyncio.timeout(self.timeout_s):
                self.endpoint = await ready
        except TimeoutError as exc:
            await self.aclose()
            raise UpstreamError(
                f"{self.host} sent no endpoint event within {self.timeout_s:g} s",
                reason="upstream_timeout",
            ) from exc
        except BaseException:
            await self.aclose()
            raise

    async def _read(self, session: McpSession, ready: asyncio.Future[str]) -> None:
        headers = {**self.headers, "Accept": "text/event-stream"}
        try:
            # No total deadline and no total cap on the stream itself: it lives as long as
            # the session; the decoder caps each event at the egress cap instead.
            async with self.egress.stream(
                "GET", self.url, headers=headers, timeout_s=math.inf, max_bytes=sys.maxsize
            ) as stream:
                if stream.status in (400, 404, 405):
                    raise Refused(
                        f"{self.host} has no SSE endpoint (HTTP {stream.status})", status=stream.status
                    )
                if stream.status != 200 or not stream.content_type.startswith("text/event-stream"):
                    raise UpstreamError(
                        f"{self.host} did not open an event stream (HTTP {stream.status})",
                        reason="upstream_unavailable",
                        data={"status": stream.status},
                    )
                decoder = SseDecoder(self.max_bytes, self.host)
                async for chunk in stream.chunks:
                    for event in decoder.feed(chunk):
                        if event.event == "endpoint" and not ready.done():
                            ready.set_result(self._endpoint(event.data))
                        elif event.event == "message" and ready.done():
                            session.deliver(_parse(event.data))
            raise UpstreamError(f"{self.host} closed the event stream", reason="upstream_unavailable")
        except UpstreamError as exc:
            if not ready.done():
                ready.set_exception(exc)
            session.closed(exc)

    def _endpoint(self, data: bytes) -> str:
        """The POST URL from the ``endpoint`` event: same origin as the SSE URL, guarded."""
        base = httpx.URL(self.url)
        try:
            target = base.join(data.decode("utf-8").strip())
        except (UnicodeDecodeError, httpx.InvalidURL) as exc:
            raise UpstreamError(f"{self.host} sent an invalid endpoint", reason="upstream_invalid") from exc
        if (target.scheme, target.host, target.port) != (base.scheme, base.host, base.port):
            raise UpstreamError(
                f"{self.host} pointed its endpoint at another origin ({target.scheme}://{target.host})",
                reason="ssrf_blocked",
            )
        return str(self.egress.check_url(target))

    async def send(self, message: dict[str, Any], *, timeout_s: float | None = None) -> None:
        if self.endpoint is None:
            raise RuntimeError("start() the transport first")
        headers = {**self.headers, "Content-Type": "application/json"}
        answer = await self.egress.send(
            "POST", self.endpoint, headers=headers, content=orjson.dumps(message), timeout_s=timeout_s
        )
        if answer.status >= 400:
            raise UpstreamError(
                f"{self.host} refused a message (HTTP {answer.status})",
                reason="upstream_unavailable",
                data={"status": answer.status},
            )

    async def aclose(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader


async def connect_http(
    egress: Egress,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = 30,
    client_info: dict[str, Any] | None = None,
    session_options: dict[str, Any] | None = None,
    prefer_modern: bool = True,
    max_bytes: int | None = None,
    auth: HttpAuth | None = None,
) -> McpSession:
    """A connected session to the MCP server at ``url`` (era negotiated; close it with aclose).

    Streamable HTTP first (modern, then the initialize handshake; ``prefer_modern=False``
    skips the probe); legacy HTTP+SSE on the same URL only when the POST of ``initialize``
    is refused with 400/404/405. ``session_options`` go to ``McpSession`` (e.g.
    ``on_tools_changed``). ``auth`` answers 401/403 challenges (OAuth; streamable HTTP only).
    """
    transport = StreamableHttpTransport(egress, url, headers, max_bytes=max_bytes, auth=auth)
    with contextlib.suppress(Refused):  # the POST of initialize refused: try legacy HTTP+SSE
        return await _connected(transport, client_info, session_options, timeout_s, modern=prefer_modern)
    return await connect_sse(
        egress,
        url,
        headers=headers,
        timeout_s=timeout_s,
        client_info=client_info,
        session_options=session_options,
        max_bytes=max_bytes,
    )


async def connect_sse(
    egress: Egress,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = 30,
    client_info: dict[str, Any] | None = None,
    session_options: dict[str, Any] | None = None,
    max_bytes: int | None = None,
) -> McpSession:
    """A connected session over legacy HTTP+SSE (``url`` is the SSE stream, e.g. ``/sse``)."""
    transport = LegacySseTransport(egress, url, headers, timeout_s=timeout_s, max_bytes=max_bytes)
    return await _connected(transport, client_info, session_options, timeout_s, modern=False)


async def _connected(
    transport: StreamableHttpTransport | LegacySseTransport,
    client_info: dict[str, Any] | None,
    session_options: dict[str, Any] | None,
    timeout_s: float,
    *,
    modern: bool,
) -> McpSession:
    """A session over ``transport``, connected; closed again whatever stops the connect."""
    session = McpSession(transport, client_info=client_info, **(session_options or {}))
    try:
        await session.connect(timeout_s=timeout_s, modern=modern)
    except BaseException:
        await session.aclose()
        raise
    return session
