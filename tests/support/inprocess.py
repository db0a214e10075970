"""The appliance served in the test's own process: ``create_app`` driven as an ASGI app.

A real ``toolspoke serve`` costs a process start, an ``init`` process and a second Python's
imports per module; most HTTP behaviour (status codes, headers, error documents, the admin
API's shapes, MCP methods) does not depend on there being a process, a socket or Sanic's
own server. Here the same app runs its start-up and shutdown listeners through the ASGI
lifespan protocol, on an event loop in a thread of its own, and a plain ``httpx.Client``
reaches it through a transport that hands each request to that loop: tests written for a
real appliance read the same, with the same assertions.

What this does not cover, and what stays with the real-process tests
(``tests/support/servers.py``): signals and shutdown, the socket-level guards (connection
caps, slow clients, raw doubled headers), streamed responses (httpx's ASGI transport reads
a response whole, so no SSE stream), and the ready line.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from click.testing import CliRunner
from sanic import Sanic
from sanic.helpers import _default

from appliance import config
from appliance.cli import main as cli_main
from appliance.gateway import demo_api
from appliance.gateway.runtime import Runtime, prepare_data_dir
from appliance.web.app import create_app
from tests.support.servers import ADMIN_KEY, SANDBOX_READ_PATHS, TEST_DEFAULTS

T = TypeVar("T")
# Where the app believes it serves (``announce`` reads the settings when no socket is
# bound): the Host every request carries, so that the Host check sees a loopback name.
HOST, PORT = "127.0.0.1", 8765
BASE_URL = f"http://{HOST}:{PORT}"
# Bounds every step run on the app's loop (start-up, one request, shutdown).
STEP_TIMEOUT_S = 20.0

# One process builds many apps; Sanic refuses a second app of a name unless in test mode.
Sanic.test_mode = True


@dataclass
class InProcess:
    """An app serving ``data_dir``, as ``tests.support.servers.Appliance`` describes a process
    (``base_url``, ``key``, ``data_dir``, ``mcp_url``), plus the app and its runtime."""

    base_url: str
    key: str
    data_dir: Path
    app: Sanic
    loop: asyncio.AbstractEventLoop
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def mcp_url(self) -> str:
        return self.base_url + "/mcp"

    @property
    def rt(self) -> Runtime:
        return self.app.ctx.rt  # type: ignore[no-any-return]

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = STEP_TIMEOUT_S) -> T:
        """Run ``coro`` on the app's loop (the runtime's objects belong to it); its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def count_demo_requests(self, hits: list[str], *, with_target: bool = True) -> None:
        """Answer the demo notes API in this process, appending each request it gets to
        ``hits`` (``"POST /notes"``, or the method alone): what reached the upstream."""
        answer = self.rt.demo_notes.answer

        async def counting(method: str, target: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
            hits.append(f"{method} {target}" if with_target else method)
            return await answer(method, target, body)

        self.rt.egress.serve_locally(demo_api.ORIGIN, counting)

    def client(
        self, *, headers: Mapping[str, str] | None = None, prefix: str = "", **options: Any
    ) -> httpx.Client:
        """A synchronous httpx client whose requests the app answers in this process (paths
        relative to ``prefix``, e.g. ``/api/v1``); closed with the app."""
        client = httpx.Client(
            base_url=self.base_url + prefix, headers=headers, transport=_LoopTransport(self), **options
        )
        self.clients.append(client)
        return client

    def request(self, method: str, url: str, **options: Any) -> httpx.Response:
        """One request, as ``httpx.request`` sends one to a real appliance."""
        with httpx.Client(base_url=self.base_url, transport=_LoopTransport(self)) as client:
            return client.request(method, url, **options)

    def mcp_client(self, key: str | None = None) -> httpx.Client:
        """A client of ``/mcp`` as an agent holds one: this app's key (or ``key``), both answer
        forms."""
        headers = {
            "Authorization": f"Bearer {key or self.key}",
            "Accept": "application/json, text/event-stream",
        }
        return self.client(headers=headers, timeout=httpx.Timeout(30, read=20))

    def async_client(
        self, *, headers: Mapping[str, str] | None = None, streaming: bool = False, **options: Any
    ) -> httpx.AsyncClient:
        """An asynchronous httpx client (for the official SDK's client, on the test's own
        loop) whose requests the app answers on its loop; the caller closes it.
        ``streaming``: each answer's body arrives as the app sends it (an SSE stream event by
        event, while the request is still running), not whole at its end."""
        transport = _StreamingTransport(self) if streaming else _AsyncLoopTransport(self)
        return httpx.AsyncClient(base_url=self.base_url, headers=headers, transport=transport, **options)


def _answer(
    asgi: httpx.ASGITransport, request: httpx.Request, body: bytes
) -> Coroutine[Any, Any, tuple[int, list[tuple[bytes, bytes]], bytes]]:
    """One request through the app (run on the app's loop): status, headers, the whole body."""

    async def answer() -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        forwarded = httpx.Request(request.method, request.url, headers=request.headers, content=body)
        got = await asgi.handle_async_request(forwarded)
        raw = b"".join([chunk async for chunk in got.stream])  # type: ignore[union-attr]
        return got.status_code, got.headers.raw, raw

    return answer()


class _LoopTransport(httpx.BaseTransport):
    """httpx's ASGI transport is asynchronous only: each request goes to the app's loop and
    the calling thread waits for the whole answer (bounded)."""

    def __init__(self, served: InProcess) -> None:
        self._served = served
        self._asgi = httpx.ASGITransport(app=served.app, client=("127.0.0.1", 40000))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        status, headers, raw = self._served.run(_answer(self._asgi, request, request.read()))
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(raw), request=request)


class _AsyncLoopTransport(httpx.AsyncBaseTransport):
    """The same for a client on another loop: the request runs on the app's loop and the
    client's loop awaits its whole answer (bounded), so a streamed answer arrives at once."""

    def __init__(self, served: InProcess) -> None:
        self._served = served
        self._asgi = httpx.ASGITransport(app=served.app, client=("127.0.0.1", 40000))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        pending = asyncio.run_coroutine_threadsafe(_answer(self._asgi, request, body), self._served.loop)
        async with asyncio.timeout(STEP_TIMEOUT_S):
            status, headers, raw = await asyncio.wrap_future(pending)
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(raw), request=request)


class _StreamingTransport(httpx.AsyncBaseTransport):
    """A request run on the app's loop as an ASGI call whose body chunks reach the client's
    loop as they are sent: what a streamed answer (a call's SSE events ahead of its response,
    a request to the client in the middle of a call) needs. Closing the response early is the
    client going away: the app's handler is cancelled, as Sanic cancels it on a real socket."""

    def __init__(self, served: InProcess) -> None:
        self._served = served

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        mine = asyncio.get_running_loop()
        chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        head: asyncio.Future[tuple[int, list[tuple[bytes, bytes]]]] = mine.create_future()
        gone = asyncio.Event()  # on the app's loop: set when the client closed the response

        def deliver(chunk: bytes | None) -> None:
            chunks.put_nowait(chunk)

        def started(status: int, headers: list[tuple[bytes, bytes]]) -> None:
            if not head.done():
                head.set_result((status, headers))

        def failed(exc: BaseException) -> None:
            if not head.done():
                head.set_exception(exc)
            chunks.put_nowait(None)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(k.lower(), v) for (k, v) in request.headers.raw],
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query,
            "server": (request.url.host, request.url.port),
            "client": ("127.0.0.1", 40000),
            "root_path": "",
        }

        async def run() -> None:
            sent_body = False

            async def receive() -> dict[str, Any]:
                nonlocal sent_body
                if not sent_body:
                    sent_body = True
                    return {"type": "http.request", "body": body, "more_body": False}
                await gone.wait()
                return {"type": "http.disconnect"}

            async def send(message: Mapping[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    mine.call_soon_threadsafe(started, message["status"], list(message.get("headers", [])))
                elif message["type"] == "http.response.body":
                    if message.get("body"):
                        mine.call_soon_threadsafe(deliver, bytes(message["body"]))
                    if not message.get("more_body", False):
                        mine.call_soon_threadsafe(deliver, None)

            try:
                await self._served.app(scope, receive, send)
            except BaseException as exc:  # the client learns of it, then it goes on up
                mine.call_soon_threadsafe(failed, exc)
                raise
            # Whatever the app did, the body ends (and a response it never started fails).
            mine.call_soon_threadsafe(failed, RuntimeError("the app sent no response"))

        app_loop = self._served.loop
        task = asyncio.run_coroutine_threadsafe(run(), app_loop)
        async with asyncio.timeout(STEP_TIMEOUT_S):
            status, headers = await head

        async def stream() -> AsyncIterator[bytes]:
            try:
                while (chunk := await chunks.get()) is not None:
                    yield chunk
            finally:
                app_loop.call_soon_threadsafe(gone.set)
                task.cancel()  # the client went away: a handler still running is cancelled

        return httpx.Response(status, headers=headers, stream=_Chunks(stream()), request=request)


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, source: AsyncIterator[bytes]) -> None:
        self._source = source

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._source:
            yield chunk

    async def aclose(self) -> None:
        await self._source.aclose()  # type: ignore[attr-defined]


def initialise(data_dir: Path, env: Mapping[str, str] | None = None) -> None:
    """``toolspoke init`` with the test admin key, run in this process through the CLI."""
    full = {"TOOLSPOKE_DATA_DIR": str(data_dir), "TOOLSPOKE_ADMIN_KEY": ADMIN_KEY, **(env or {})}
    done = CliRunner().invoke(cli_main, ["init"], env=full, catch_exceptions=False)
    assert done.exit_code == 0, done.output


def settings_for(data_dir: Path, env: Mapping[str, str] | None = None) -> config.Settings:
    """The settings ``serve`` would resolve with these environment variables, and only those
    (not the test runner's own environment)."""
    full = {
        **TEST_DEFAULTS,
        "TOOLSPOKE_DATA_DIR": str(data_dir),
        "TOOLSPOKE_ADMIN_KEY": ADMIN_KEY,
        "ALLOWED_TOOL_CIDRS": "127.0.0.1/32",
        "TOOLSPOKE_HOST": HOST,
        "TOOLSPOKE_PORT": str(PORT),
        "TOOLSPOKE_STDIO_SANDBOX_READ_PATHS": SANDBOX_READ_PATHS,
        **(env or {}),
    }
    return config.load(env=full)


class _Lifespan:
    """The ASGI lifespan conversation with the app: start-up now, shutdown at the end."""

    def __init__(self, app: Sanic) -> None:
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        self._task = asyncio.create_task(app(scope, self._inbox.get, self._outbox.put))

    async def _step(self, kind: str) -> None:
        await self._inbox.put({"type": f"lifespan.{kind}"})
        async with asyncio.timeout(STEP_TIMEOUT_S):
            got = await self._outbox.get()
        assert got["type"] == f"lifespan.{kind}.complete", got

    async def startup(self) -> None:
        await self._step("startup")

    async def shutdown(self) -> None:
        await self._step("shutdown")
        async with asyncio.timeout(STEP_TIMEOUT_S):
            await self._task


@contextmanager
def served_in_process(data_dir: Path, *, env: Mapping[str, str] | None = None) -> Iterator[InProcess]:
    """``toolspoke init`` then the app of ``toolspoke serve`` on ``data_dir``, in this process."""
    initialise(data_dir, env)
    settings = settings_for(data_dir, env)
    prepare_data_dir(settings)
    app = create_app(settings, name=f"toolspoke_{id(data_dir):x}")
    # Sanic warns (an error under this suite's filterwarnings) that an ASGI server, not it,
    # picks the loop: the loop is ours here, so the app's choice is left unset.
    app.config.USE_UVLOOP = _default
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="in-process-app", daemon=True)
    thread.start()

    def on_loop(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(STEP_TIMEOUT_S * 2)

    async def start() -> _Lifespan:
        lifespan = _Lifespan(app)
        await lifespan.startup()
        return lifespan

    # The app's log queue (web/log_queue.py) takes over the root logger's handlers while it
    # runs; here those are pytest's per-phase capture handlers, which it would hand back
    # stale. With no handlers at start-up it leaves the root logger alone.
    root = logging.getLogger()
    held = list(root.handlers)
    for handler in held:
        root.removeHandler(handler)
    try:
        lifespan = on_loop(start())
    finally:
        for handler in held:
            root.addHandler(handler)
    served = InProcess(BASE_URL, ADMIN_KEY, data_dir, app, loop)
    try:
        yield served
    finally:
        for client in served.clients:
            client.close()
        try:
            on_loop(lifespan.shutdown())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=STEP_TIMEOUT_S)
            loop.close()
