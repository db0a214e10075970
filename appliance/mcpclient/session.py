"""The gateway's MCP client session: JSON-RPC 2.0 over any message transport.

The session owns ids, correlation, deadlines, notifications and the protocol era; a
transport (``mcp_http`` for streamable HTTP and legacy SSE, later stdio) only moves
messages. It hands every inbound message to ``McpSession.deliver`` together with the id of
the request whose stream carried it (``origin``, when the transport knows it), so an
answer that arrives on A's stream can never settle B.

Eras: the 2026-07-28 revision (stateless: ``_meta`` on every request, ``server/discover``
first) is preferred; a server that refuses discover with anything that is not positive
modern evidence gets the 2025-11-25 ``initialize`` handshake, like the SDK 2.x clients do
(NOTES.md section 2; versioning.mdx "Backward Compatibility").

Everything that goes wrong upstream becomes an ``UpstreamError``: a JSON-RPC error reply is
``upstream_error`` (with its ``code``), a malformed answer ``upstream_invalid``, a passed
deadline ``upstream_timeout``, a dead connection ``upstream_unavailable``. We advertise no
client capabilities, so server-initiated requests (sampling, elicitation, roots) are
answered ``-32601`` here and never relayed.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from appliance.errors import (
    HeaderMismatch,
    MethodNotFound,
    MissingClientCapability,
    UnsupportedProtocolVersion,
    UpstreamError,
)
from appliance.protocol import param_headers
from appliance.protocol.log_levels import log_rank
from appliance.protocol.meta import (
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    LOG_LEVEL_KEY,
    PROGRESS_TOKEN_KEY,
    PROTOCOL_VERSION_KEY,
    SERVER_INFO_KEY,
)
from appliance.protocol.relays import LogRelay, ProgressCallback
from appliance.protocol.versions import LATEST_LEGACY, LEGACY_VERSIONS, MODERN_VERSION

log = logging.getLogger(__name__)

RequestId: TypeAlias = int | str
ChangeCallback: TypeAlias = Callable[[], Awaitable[None] | None]
# JSON-RPC codes read in upstream answers: the same numbers the gateway's own errors carry.
UNSUPPORTED_VERSION = UnsupportedProtocolVersion.rpc_code
METHOD_NOT_FOUND = MethodNotFound.rpc_code
MISSING_CAPABILITY = MissingClientCapability.rpc_code
# Codes that only a modern server sends: they mean "do not fall back to initialize".
MODERN_ONLY_ERRORS = frozenset({HeaderMismatch.rpc_code, MISSING_CAPABILITY})
DEFAULT_CLIENT_INFO = {"name": "toolspoke", "version": "0.1"}
MAX_TOOL_PAGES = 100  # a server that pages forever is broken, not big
_MAX_MESSAGE_TEXT = 500  # upstream error text we pass on, at most
_CANCEL_NOTICE_S = 5.0


class Refused(UpstreamError):
    """The transport refused the message without a JSON-RPC answer (HTTP 400/404/405).

    During era negotiation this means "not a modern endpoint"; for ``initialize`` on HTTP
    it means "not a streamable HTTP endpoint" (try legacy SSE).
    """

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message, reason="upstream_unavailable", data={"status": status})
        self.status = status


class SessionExpired(UpstreamError):
    """The server no longer knows our 2025-era session (HTTP 404 with ``Mcp-Session-Id``)."""

    def __init__(self, message: str = "the upstream session expired") -> None:
        super().__init__(message, reason="upstream_unavailable", data={"status": 404})


class MessageTransport(Protocol):
    """What the session needs from a transport.

    ``inline_answers``: ``send`` of a request returns only once its answer was delivered,
    or never will be (streamable HTTP: the answer rides on the POST's response).
    ``request_scoped``: in the modern era every request has its own stream (streamable
    HTTP 2026-07-28): abandoning ``send`` is the cancellation signal, and the client sends
    no notifications/cancelled and no responses.
    """

    inline_answers: bool
    request_scoped: bool

    async def start(self, session: McpSession) -> None: ...

    async def send(self, message: dict[str, Any], *, timeout_s: float | None = None) -> None: ...

    def negotiated(self, version: str, *, modern: bool) -> None: ...

    async def aclose(self) -> None: ...


@dataclass
class _Pending:
    method: str
    future: asyncio.Future[dict[str, Any]]
    progress_token: str | None = None
    on_progress: ProgressCallback | None = None
    on_log: LogRelay | None = None
    # Relays of this request's notifications still being sent to our caller: the answer
    # waits for them, so that the caller gets them ahead of the result, in order.
    relays: list[asyncio.Task[None]] = field(default_factory=list)


def _invalid(text: str) -> UpstreamError:
    return UpstreamError(f"the upstream sent a malformed answer: {text}", reason="upstream_invalid")


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _result_problem(method: str, result: Any) -> str | None:
    """Why ``result`` is not a valid answer to ``method`` (None: it is)."""
    if not isinstance(result, dict):
        return "result is not an object"
    if result.get("resultType", "complete") != "complete":
        # input_required needs client capabilities we never advertise.
        return f"unsupported resultType {result.get('resultType')!r}"
    if method == "tools/call":
        content = result.get("content")
        if not isinstance(content, list) or not all(
            isinstance(c, dict) and isinstance(c.get("type"), str) for c in content
        ):
            return "content is not an array of typed blocks"
        if not isinstance(result.get("isError", False), bool):
            return "isError is not a boolean"
        if not isinstance(result.get("structuredContent", {}), dict):
            return "structuredContent is not an object"
    elif method == "tools/list":
        tools = result.get("tools")
        if not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools
        ):
            return "tools is not an array of named tools"
        if not isinstance(result.get("nextCursor", ""), str | None):
            return "nextCursor is not a string"
    elif method == "initialize":
        if not isinstance(result.get("protocolVersion"), str):
            return "protocolVersion is missing"
        if not isinstance(result.get("capabilities", {}), dict):
            return "capabilities is not an object"
    return None


class McpSession:
    """One logical connection to one upstream MCP server (keep one per toolkit)."""

    def __init__(
        self,
        transport: MessageTransport,
        *,
        client_info: dict[str, Any] | None = None,
        on_tools_changed: ChangeCallback | None = None,
    ) -> None:
        self.transport = transport
        self.client_info = dict(client_info or DEFAULT_CLIENT_INFO)
        self.on_tools_changed = on_tools_changed
        self._ids = itertools.count(1)
        self._pending: dict[RequestId, _Pending] = {}
        self._headers: dict[RequestId, dict[str, str]] = {}  # per-request extra HTTP headers
        self._tasks: set[asyncio.Task[Any]] = set()
        self._modern: bool | None = None  # None until connected
        self._version = ""
        self._server_info: dict[str, Any] = {}
        self._capabilities: dict[str, Any] = {}
        self._instructions: str | None = None
        self._generation = 0  # bumped by every (re-)initialize
        self._reinit = asyncio.Lock()
        self._closed: UpstreamError | None = None
        self._started = False
        self.dropped = 0  # inbound messages we could attribute to no request
        self.unattributed_logs = 0  # log messages dropped: several calls ran, none was named

    # -- public API ----------------------------------------------------------------------

    @property
    def protocol_version(self) -> str:
        return self._version

    @property
    def modern(self) -> bool:
        return bool(self._modern)

    @property
    def server_info(self) -> dict[str, Any]:
        return dict(self._server_info)

    @property
    def capabilities(self) -> dict[str, Any]:
        return dict(self._capabilities)

    @property
    def instructions(self) -> str | None:
        return self._instructions

    def headers_for(self, request_id: RequestId) -> dict[str, str]:
        """Extra HTTP headers the caller gave for this request (for HTTP transports)."""
        return dict(self._headers.get(request_id) or {})

    @property
    def is_closed(self) -> bool:
        """True once the connection is gone (closed, or the transport lost it)."""
        return self._closed is not None

    async def connect(self, *, timeout_s: float = 30, modern: bool = True) -> None:
        """Start the transport and settle the era (``modern=False``: handshake only)."""
        if not self._started:
            self._started = True
            await self.transport.start(self)
        if modern and await self._discover(timeout_s):
            return
        await self._initialize(timeout_s)

    async def list_tools(self, *, timeout_s: float = 30) -> list[dict[str, Any]]:
        """Every tool, following ``nextCursor`` (at most MAX_TOOL_PAGES pages)."""
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_TOOL_PAGES):
            params = {"cursor": cursor} if cursor else {}
            page = await self.request("tools/list", params, timeout_s=timeout_s)
            tools.extend(self._usable(page["tools"]))
            cursor = page.get("nextCursor") or None
            if cursor is None:
                return tools
            if cursor in seen:
                raise _invalid("tools/list repeated a cursor")
            seen.add(cursor)
        raise _invalid(f"tools/list has more than {MAX_TOOL_PAGES} pages")

    def _usable(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Over streamable HTTP a tool whose ``x-mcp-header`` annotations break SEP-2243's
        rules is dropped, with a warning (the client MUST exclude it; others MAY ignore them)."""
        if not getattr(self.transport, "mirrors_headers", False):
            return tools
        kept = []
        for tool in tools:
            try:
                param_headers.annotated_params(tool.get("inputSchema"))
            except param_headers.InvalidAnnotation as exc:
                log.warning("dropped upstream tool %r: %s", str(tool.get("name"))[:80], exc)
                continue
            kept.append(tool)
        return kept

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout_s: float,
        on_progress: ProgressCallback | None = None,
        on_log: LogRelay | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """The raw CallToolResult (``isError`` results are returned, not raised).

        ``headers``: extra HTTP headers for this call (SEP-2243 ``Mcp-Param-*``), which a
        transport that has headers sends in the 2026-07-28 era."""
        params = {"name": name, "arguments": dict(arguments or {})}
        return await self.request(
            "tools/call", params, timeout_s=timeout_s, on_progress=on_progress, on_log=on_log, headers=headers
        )

    async def ping(self, *, timeout_s: float = 10) -> None:
        """A liveness check: ``ping`` (2025 era) or ``server/discover`` (2026-07-28 has no ping)."""
        method = "server/discover" if self._modern else "ping"
        await self.request(method, {}, timeout_s=timeout_s)

    async def aclose(self) -> None:
        if self._closed is None:
            self._closed = UpstreamError("the upstream session is closed", reason="upstream_unavailable")
        self._fail_all(self._closed)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.transport.aclose()

    async def __aenter__(self) -> McpSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- requests ------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        timeout_s: float,
        on_progress: ProgressCallback | None = None,
        on_log: LogRelay | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Send one request and wait for its validated result (one retry on session expiry)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        generation = self._generation
        try:
            return await self._request_once(method, params, deadline, on_progress, on_log, headers)
        except SessionExpired:
            if self._modern is not False or method == "initialize":
                raise
        # The server forgot the 2025 session, so it never ran the request: re-initialise
        # (once for all requests that saw the same expiry) and retry exactly once.
        async with self._reinit:
            if self._generation == generation:
                await self._initialize(max(0.001, deadline - loop.time()))
        try:
            return await self._request_once(method, params, deadline, on_progress, on_log, headers)
        except SessionExpired as exc:
            raise UpstreamError(
                "the upstream session expired again right after re-initialising",
                reason="upstream_unavailable",
                data={"status": 404},
            ) from exc

    async def _request_once(
        self,
        method: str,
        params: dict[str, Any] | None,
        deadline: float,
        on_progress: ProgressCallback | None,
        on_log: LogRelay | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        if self._closed is not None:
            raise UpstreamError(self._closed.public_message, reason=self._closed.reason)
        loop = asyncio.get_running_loop()
        request_id = next(self._ids)
        pending = _Pending(method, loop.create_future())
        body = dict(params or {})
        meta = dict(body.get("_meta") or {})
        if self._modern or method == "server/discover":
            meta.update(self._modern_meta())
        if on_progress is not None or (on_log is not None and not self._scoped()):
            # On a shared channel (stdio, legacy SSE) a call that relays logs carries a token
            # too: a server that tags its log messages with it (``_meta.progressToken``) lets
            # us attribute them when several calls run (_relay_log).
            pending.progress_token = f"p{request_id}"
            pending.on_progress = on_progress
            meta[PROGRESS_TOKEN_KEY] = pending.progress_token
        if on_log is not None:
            pending.on_log = on_log
            if self._modern:  # 2026-07-28: no level in _meta, no log messages at all
                meta[LOG_LEVEL_KEY] = on_log.level
        if meta:
            body["_meta"] = meta
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": body}
        self._pending[request_id] = pending
        if headers:
            self._headers[request_id] = headers
        timeout_s = max(0.0, deadline - loop.time())
        try:
            async with asyncio.timeout_at(deadline):
                try:
                    await self.transport.send(message, timeout_s=timeout_s)
                except UpstreamError:
                    if not pending.future.done():
                        raise
                    # The answer came before the stream broke: it stands.
                if self.transport.inline_answers and not pending.future.done():
                    raise _invalid(f"the answer to {method} ended without a response")
                result = await pending.future
                if pending.relays:
                    await asyncio.wait(pending.relays)
                return result
        except TimeoutError as exc:
            self._abandon(request_id, "deadline passed")
            raise UpstreamError(
                f"the upstream did not answer {method} within {timeout_s:g} s",
                reason="upstream_timeout",
            ) from exc
        except asyncio.CancelledError:
            self._abandon(request_id, "the caller went away")
            raise
        finally:
            self._pending.pop(request_id, None)
            self._headers.pop(request_id, None)
            if not pending.future.done():
                pending.future.cancel()
            elif not pending.future.cancelled():
                pending.future.exception()  # mark it retrieved: no "never retrieved" noise

    def _modern_meta(self) -> dict[str, Any]:
        return {
            PROTOCOL_VERSION_KEY: MODERN_VERSION,
            CLIENT_INFO_KEY: self.client_info,
            CLIENT_CAPABILITIES_KEY: {},
        }

    def _abandon(self, request_id: RequestId, reason: str) -> None:
        """Tell the server we gave up on ``request_id`` (closing the stream, or a notice)."""
        pending = self._pending.get(request_id)
        if pending is None or self._closed is not None:
            return
        if pending.future.done() and not pending.future.cancelled():
            return  # answered after all (awaiting it was what got cancelled otherwise)
        if self._scoped():
            return  # the aborted POST stream is the signal
        notice = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": reason},
        }
        self._spawn(self._send_quietly(notice, _CANCEL_NOTICE_S))

    async def _send_quietly(self, message: dict[str, Any], timeout_s: float) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                await self.transport.send(message, timeout_s=timeout_s)
        except (UpstreamError, TimeoutError) as exc:
            log.debug("could not send %s to the upstream: %s", message.get("method", "a reply"), exc)

    def _scoped(self) -> bool:
        return bool(self._modern and self.transport.request_scoped)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- eras ----------------------------------------------------------------------------

    async def _discover(self, timeout_s: float) -> bool:
        """Try the modern era; False means "fall back to initialize"."""
        try:
            result = await self.request("server/discover", {}, timeout_s=timeout_s)
        except Refused:
            return False  # HTTP 400/404/405 without a JSON-RPC body: not a modern endpoint
        except UpstreamError as exc:
            if exc.reason != "upstream_error":
                raise  # outages, timeouts and garbage are not era verdicts
            if exc.data.get("code") in MODERN_ONLY_ERRORS:
                raise  # a modern server objecting to our request: falling back would not help
            if exc.data.get("code") == UNSUPPORTED_VERSION:
                supported = exc.data.get("supported")
                if isinstance(supported, list) and not any(v in LEGACY_VERSIONS for v in supported):
                    raise UpstreamError(
                        f"the upstream supports none of our protocol versions ({supported})",
                        reason="upstream_invalid",
                    ) from exc
            return False
        versions = result.get("supportedVersions")
        if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
            # Not a discover answer: a legacy server that answers every request it does not
            # know with an empty result (the MCP conformance suite's servers do). Handshake.
            return False
        if MODERN_VERSION not in versions:
            return False  # a discover-answering server that advertises only legacy versions
        self._modern = True
        self._version = MODERN_VERSION
        meta = result.get("_meta")
        info = (meta if isinstance(meta, dict) else {}).get(SERVER_INFO_KEY) or result.get("serverInfo")
        self._adopt(info, result.get("capabilities"), result.get("instructions"))
        self.transport.negotiated(MODERN_VERSION, modern=True)
        return True

    async def _initialize(self, timeout_s: float) -> None:
        params = {"protocolVersion": LATEST_LEGACY, "capabilities": {}, "clientInfo": self.client_info}
        self._modern = False
        result = await self.request("initialize", params, timeout_s=timeout_s)
        version = result["protocolVersion"]
        if version not in LEGACY_VERSIONS:
            raise UpstreamError(
                f"the upstream chose protocol version {version[:40]!r}, which we do not speak",
                reason="upstream_invalid",
            )
        self._version = version
        self._adopt(result.get("serverInfo"), result.get("capabilities"), result.get("instructions"))
        self.transport.negotiated(version, modern=False)
        self._generation += 1
        await self.transport.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _adopt(self, info: Any, capabilities: Any, instructions: Any) -> None:
        self._server_info = dict(info) if isinstance(info, dict) else {}
        self._capabilities = dict(capabilities) if isinstance(capabilities, dict) else {}
        self._instructions = instructions if isinstance(instructions, str) else None

    # -- inbound -------------------------------------------------------------------------

    def deliver(self, message: Any, origin: RequestId | None = None) -> None:
        """One inbound message (``origin``: the request whose stream carried it, if known)."""
        if not isinstance(message, dict):
            self._misfit(origin, "a message that is not a JSON object", guess=origin is None)
            return
        if "method" in message:
            self._on_server_message(message, origin)
            return
        if message.get("jsonrpc") != "2.0":
            msg_id = origin if origin is not None else message.get("id")
            self._misfit(msg_id, "jsonrpc is not 2.0", guess=not _is_id(msg_id))
            return
        msg_id = message.get("id")
        if origin is not None and msg_id != origin:
            # An answer on A's stream must be A's: anything else fails A and settles nobody.
            self._misfit(origin, "an answer with the wrong id")
            return
        pending = self._pending.get(msg_id) if isinstance(msg_id, int | str) else None
        if pending is None or pending.future.done():
            # A late or duplicate answer (a usable id) is dropped; an unusable id is garbage.
            self._misfit(None, "an answer to no open request", guess=not _is_id(msg_id))
            return
        outcome = self._outcome(pending.method, message)
        if isinstance(outcome, UpstreamError):
            pending.future.set_exception(outcome)
        else:
            pending.future.set_result(outcome)

    def closed(self, error: UpstreamError) -> None:
        """The transport lost the connection: every open request fails with ``error``."""
        self._closed = error
        self._fail_all(error)

    def _fail_all(self, error: UpstreamError) -> None:
        for pending in list(self._pending.values()):
            if not pending.future.done():
                # A fresh error per request, keeping its data (e.g. the cap of a too-large event).
                failure = UpstreamError(error.public_message, reason=error.reason, data=dict(error.data))
                pending.future.set_exception(failure)

    def _outcome(self, method: str, message: dict[str, Any]) -> dict[str, Any] | UpstreamError:
        has_result, has_error = "result" in message, "error" in message
        if has_result == has_error:
            return _invalid("an answer needs exactly one of result and error")
        if has_error:
            error = message["error"]
            code = error.get("code") if isinstance(error, dict) else None
            if not isinstance(code, int) or isinstance(code, bool):
                return _invalid("error.code is not an integer")
            if not isinstance(error.get("message"), str):
                return _invalid("error.message is not a string")
            data: dict[str, Any] = {"code": error["code"]}
            extra = error.get("data")
            if error["code"] == UNSUPPORTED_VERSION and isinstance(extra, dict):
                data["supported"] = extra.get("supported")
            required = extra.get("requiredCapabilities") if isinstance(extra, dict) else None
            if error["code"] == MISSING_CAPABILITY and isinstance(required, dict):
                data["requiredCapabilities"] = required  # what our caller may have to declare
            text = error["message"][:_MAX_MESSAGE_TEXT]
            return UpstreamError(
                f"the upstream answered {method} with an error: {text}", reason="upstream_error", data=data
            )
        problem = _result_problem(method, message["result"])
        if problem:
            return _invalid(f"{method}: {problem}")
        result: dict[str, Any] = message["result"]
        return result

    def _misfit(self, request_id: Any, what: str, *, guess: bool = False) -> None:
        """A malformed or stray message: fail the request it belongs to, if we can tell."""
        pending = self._pending.get(request_id) if _is_id(request_id) else None
        if pending is None and guess:
            open_ = [p for p in self._pending.values() if not p.future.done()]
            # One open request cannot be confused with another: failing it fast beats
            # letting it run into its deadline. With several, we cannot tell whose it was.
            pending = open_[0] if len(open_) == 1 else None
        if pending is None or pending.future.done():
            self.dropped += 1
            log.warning("dropped %s from the upstream", what)
            return
        pending.future.set_exception(_invalid(what))

    def _on_server_message(self, message: dict[str, Any], origin: RequestId | None) -> None:
        method, params = message.get("method"), message.get("params")
        if "id" in message:
            # A request from the server: we advertised no capability, so none is served
            # (and in the request-scoped modern era the client may not even answer).
            if _is_id(message["id"]) and not self._scoped():
                reply = {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "error": {"code": METHOD_NOT_FOUND, "message": f"method not supported: {method}"},
                }
                self._spawn(self._send_quietly(reply, _CANCEL_NOTICE_S))
            return
        if message.get("jsonrpc") != "2.0" or not isinstance(params, dict | None):
            log.debug("ignored a malformed notification from the upstream")
            return
        if method == "notifications/progress" and params:
            token = params.get(PROGRESS_TOKEN_KEY)
            for pending in self._pending.values():
                if pending.progress_token is not None and pending.progress_token == token:
                    if pending.on_progress is not None and not pending.future.done():
                        self._call_back(pending.on_progress, dict(params), pending=pending)
                    return
        elif method == "notifications/message" and params:
            self._relay_log(params, origin)
        elif method == "notifications/tools/list_changed" and self.on_tools_changed is not None:
            self._call_back(self.on_tools_changed)

    def _relay_log(self, params: dict[str, Any], origin: RequestId | None) -> None:
        """A log message goes to the call it belongs to: the request whose stream carried it;
        else (stdio, legacy SSE: the spec puts nothing on the wire) the call whose progress
        token the message's ``_meta`` names, or the only tools/call running. Otherwise it
        is dropped and counted: a guess could hand one caller another caller's messages."""
        if origin is not None:
            pending = self._pending.get(origin)
        else:
            meta = params.get("_meta")
            token = meta.get(PROGRESS_TOKEN_KEY) if isinstance(meta, dict) else None
            calls = [p for p in self._pending.values() if p.method == "tools/call" and not p.future.done()]
            tagged = [p for p in calls if token is not None and p.progress_token == token]
            pending = tagged[0] if tagged else calls[0] if len(calls) == 1 and token is None else None
            if pending is None and calls:
                self.unattributed_logs += 1
                log.debug("dropped an upstream log message: %d calls running, none named", len(calls))
        relay = pending.on_log if pending is not None and not pending.future.done() else None
        if relay is None or log_rank(params.get("level")) < log_rank(relay.level):
            return
        self._call_back(relay.deliver, dict(params), pending=pending)

    def _call_back(self, callback: Callable[..., Any], *args: Any, pending: _Pending | None = None) -> None:
        try:
            outcome = callback(*args)
        except Exception:
            log.exception("an upstream notification callback failed")
            return
        if inspect.isawaitable(outcome):
            task = self._spawn(self._await_quietly(outcome))
            if pending is not None:
                pending.relays = [t for t in pending.relays if not t.done()]
                pending.relays.append(task)

    async def _await_quietly(self, outcome: Awaitable[Any]) -> None:
        try:
            await outcome
        except Exception:
            log.exception("an upstream notification callback failed")
