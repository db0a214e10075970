"""The Sanic app factory: routes, and the hooks that run the runtime's serving order."""

from __future__ import annotations

import importlib.util
import inspect
import logging
import secrets
import socket

from sanic import Request, Sanic, response
from sanic.http.http1 import Http
from sanic.response import HTTPResponse

from appliance import __version__
from appliance.config import Settings
from appliance.errors import ApplianceError
from appliance.gateway.lifecycle import Face, Serving
from appliance.gateway.runtime import Runtime
from appliance.gateway.services import Service, at_once
from appliance.rpc.session import SessionStore
from appliance.web import (
    admin,
    admin_access,
    admin_backup,
    admin_connections,
    admin_credentials,
    admin_health,
    admin_ledger,
    admin_openapi,
    admin_people,
    admin_search,
    admin_sync,
    demo,
    mcp,
    metrics,
    oauth,
    refusals,
    shutdown,
    sse,
)
from appliance.web.connections import Admission
from appliance.web.console import pages as console_pages  # noqa: F401 (its routes join console.bp)
from appliance.web.console import routes as console
from appliance.web.log_queue import LogQueue

log = logging.getLogger(__name__)


def _touchup_possible() -> bool:
    """Whether Sanic's start-up touch-up can run: it rewrites its request-handling methods
    from their source to drop the dispatch of lifecycle signals nobody listens to (~5 % of a
    tool call's CPU). It needs that source; the one-file bundle ships Sanic's (toolspoke.spec)
    but a build that lacks it must still start."""
    try:
        inspect.getsource(Http.http1_request_header)
    except (OSError, TypeError):
        return False
    return True


def create_app(settings: Settings, *, name: str = "toolspoke") -> Sanic:
    # Sanic's own logging config would give its loggers a second handler (its format) beside
    # the root one `serve` sets up (which they propagate to): every line twice. The root's
    # handler, behind the log queue, writes them once.
    app: Sanic = Sanic(name, configure_logging=False)
    app.config.TOUCHUP = _touchup_possible()
    # uvloop where installed (less CPU per call than the stock loop; `toolspoke stdio` uses
    # it too, cli/common.py); the stock asyncio loop where it is absent (Windows, PyPy). The
    # stdio supervisor spawns and watches children itself (children/spawn.py), alike on both.
    app.config.USE_UVLOOP = importlib.util.find_spec("uvloop") is not None
    app.config.REQUEST_MAX_SIZE = settings.max_request_bytes
    app.config.REQUEST_TIMEOUT = 30
    app.config.RESPONSE_TIMEOUT = max(60, int(settings.upstream_timeout_s) + 15)
    app.config.GRACEFUL_SHUTDOWN_TIMEOUT = settings.shutdown_grace_s
    app.config.FALLBACK_ERROR_FORMAT = "json"
    app.config.NOISY_EXCEPTIONS = False
    app.ctx.settings = settings
    # connection caps, kept by serve's protocol (web/connections.py)
    app.ctx.admission = Admission(
        total=settings.max_connections, per_address=settings.max_connections_per_address
    )
    app.ctx.sessions = SessionStore(
        settings.session_ttl_s, settings.max_sessions, per_key=settings.max_sessions_per_key
    )
    app.ctx.sse_hub = sse.Hub(settings.max_sessions, settings.max_streams_per_key)
    app.blueprint(mcp.bp)
    app.blueprint(admin.bp)
    app.blueprint(admin_people.bp)  # the caller, users, agents, keys
    app.blueprint(admin_access.bp)  # projects, toolkit access, grants
    app.blueprint(admin_openapi.bp)
    app.blueprint(admin_credentials.bp)
    app.blueprint(admin_connections.bp)  # each person's own connection, a toolkit's mode
    app.blueprint(admin_ledger.bp)  # credits, prices and ceilings, call history
    app.blueprint(admin_backup.bp)  # GET /api/v1/backup
    app.blueprint(metrics.bp)  # /metrics, /healthz, /readyz
    app.blueprint(admin_health.bp)  # upstream health, probes
    app.blueprint(admin_search.bp)  # semantic search: status, kill switch, backfill
    app.blueprint(admin_sync.bp)  # re-sync, approval, reclassification
    app.blueprint(sse.bp)  # legacy HTTP+SSE transport: GET /sse, POST /messages
    app.blueprint(console.bp)  # the admin console: /console/
    app.blueprint(oauth.bp)  # the appliance as an OAuth client: its client metadata document
    if settings.demo:
        app.blueprint(demo.bp)

    @app.get("/")
    async def root(request: Request) -> HTTPResponse:
        return response.redirect("/console/", status=303)

    @app.get("/health")
    async def health(request: Request) -> HTTPResponse:
        return response.json({"status": "ok", "version": __version__})

    refusals.install(app)  # a doubled Host or Origin header, on every route

    @app.exception(Exception)
    async def on_error(request: Request, exc: Exception) -> HTTPResponse:
        status = getattr(exc, "status_code", None)
        if request.path == console.PREFIX or request.path.startswith(console.PREFIX + "/"):
            return console.unrouted(request, exc)  # a page, with the console's headers
        if status == 413:  # stating the limit, as a JSON-RPC error on the MCP routes
            return refusals.too_large(request, settings.max_request_bytes)
        if isinstance(status, int) and status < 500:
            # Sanic's own 4xx (404 route, 405, 413 too large, 408 timeout): message only.
            return response.json(
                {"error": {"reason": "http_error", "message": str(exc)[:200]}}, status=status
            )
        if isinstance(exc, ApplianceError) and type(exc) is not ApplianceError:
            return admin.error_response(exc)
        correlation = secrets.token_hex(8)
        log.error("unhandled error %s on %s %s", correlation, request.method, request.path, exc_info=exc)
        return response.json(
            {"error": {"reason": "internal", "message": f"internal error; reference {correlation}"}},
            status=500,
        )

    _serve_in_order(app, settings)
    return app


def _serve_in_order(app: Sanic, settings: Settings) -> None:
    """The runtime's serving order (gateway/lifecycle.py) run by one hook at each of the
    server's four moments: before it serves, once it serves, when its stop begins, and
    once it has drained the calls in flight. This face adds its parts and decides nothing
    about their order."""
    logs = LogQueue()  # log lines are written by a thread, never by the event loop
    take_stop_signals = shutdown.keep_early_stop_signals(app)

    async def announce() -> None:
        take_stop_signals()  # a SIGTERM just after the ready line still stops
        rt: Runtime = app.ctx.rt
        host, port = _bound_address(app)
        rt.self_base_url = f"http://{_client_host(host)}:{port}"
        # One parseable line on stdout: tests and scripts wait for it.
        print(f"toolspoke {__version__} serving MCP on {rt.self_base_url}/mcp", flush=True)

    async def stop_taking_work() -> None:
        await shutdown.stop_taking_work(app)

    face = Face(
        logs=Service("log thread", at_once(logs.start), at_once(logs.stop)),
        prepare=Service("backups", at_once(lambda: admin_backup.prepare(app))),
        announce=Service("ready line", announce),
        streams=Service("SSE streams", stop=app.ctx.sse_hub.shutdown),
        guard=Service("shutdown guard", stop=stop_taking_work),
    )
    serving = app.ctx.serving = Serving(Runtime(settings), face)
    app.ctx.rt = serving.rt

    @app.before_server_start
    async def open_services(app: Sanic) -> None:
        await serving.open()

    @app.after_server_start
    async def start_serving(app: Sanic) -> None:
        await serving.serve()

    @app.before_server_stop
    async def stop_serving(app: Sanic) -> None:
        await serving.quiesce()

    @app.after_server_stop
    async def close_services(app: Sanic) -> None:
        await serving.close()


def _bound_address(app: Sanic) -> tuple[str, int]:
    # `serve` binds the socket itself (so port 0 works) and records what it got.
    bound = getattr(app.ctx, "bound_address", None)
    if bound is not None:
        return str(bound[0]), int(bound[1])
    return app.ctx.settings.host, app.ctx.settings.port


def _client_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def listen_socket(host: str, port: int) -> socket.socket:
    """Bind before Sanic starts, so port 0 works and the real port is known."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
