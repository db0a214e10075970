"""The Sanic app factory and its lifecycle: open the runtime, install the demo, serve."""

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
from appliance.gateway import idempotency, imports
from appliance.gateway.runtime import Runtime
from appliance.rpc.session import SessionStore
from appliance.web import (
    admin,
    admin_access,
    admin_backup,
    admin_credentials,
    admin_ledger,
    admin_openapi,
    admin_people,
    admin_sync,
    demo,
    mcp,
    metrics,
    refusals,
    shutdown,
    sse,
)
from appliance.web.connections import Admission
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
    # stdio supervisor spawns and watches children itself (upstream/spawn.py), alike on both.
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
    app.blueprint(mcp.bp)
    app.blueprint(admin.bp)
    app.blueprint(admin_people.bp)  # the caller, users, agents, keys
    app.blueprint(admin_access.bp)  # projects, toolkit access, grants
    app.blueprint(admin_openapi.bp)
    app.blueprint(admin_credentials.bp)
    app.blueprint(admin_ledger.bp)  # credits, prices and ceilings, call history
    app.blueprint(admin_backup.bp)  # GET /api/v1/backup
    app.blueprint(metrics.bp)  # /metrics, /healthz, /readyz
    if settings.demo:
        app.blueprint(demo.bp)

    @app.get("/health")
    async def health(request: Request) -> HTTPResponse:
        return response.json({"status": "ok", "version": __version__})

    refusals.install(app)  # a doubled Host or Origin header, on every route

    @app.exception(Exception)
    async def on_error(request: Request, exc: Exception) -> HTTPResponse:
        status = getattr(exc, "status_code", None)
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

    logs = LogQueue()  # log lines are written by a thread, never by the event loop

    @app.before_server_start
    async def open_runtime(app: Sanic) -> None:
        logs.start()
        rt = Runtime(settings)
        await rt.open()
        # Keys whose call a killed process left running: never run again (LEDGER-05/06).
        await idempotency.recover(rt)
        app.ctx.rt = rt

    shutdown.keep_early_stop_signals(app)  # a SIGTERM just after the ready line still stops

    @app.after_server_start
    async def announce(app: Sanic) -> None:
        rt: Runtime = app.ctx.rt
        host, port = _bound_address(app)
        rt.self_base_url = f"http://{_client_host(host)}:{port}"
        await imports.ensure_demo(rt)  # answered in process, at its own origin (gateway/demo_api.py)
        # One parseable line on stdout: tests and scripts wait for it.
        print(f"toolspoke {__version__} serving MCP on {rt.self_base_url}/mcp", flush=True)

    @app.after_server_stop
    async def flush_logs(app: Sanic) -> None:
        logs.stop()

    # After the server stopped (registered after flush_logs: stop listeners run in reverse
    # order), so calls still in flight at SIGTERM finish on an open runtime (web/shutdown.py).
    @app.after_server_stop
    async def close_runtime(app: Sanic) -> None:
        rt = getattr(app.ctx, "rt", None)
        if rt is not None:
            await rt.close()

    # health probes (issue 3 item 7): routes, and the probe task, started once the server
    # serves; registered after close_runtime so that (stop listeners run in reverse order)
    # it stops before the runtime closes.
    from appliance.gateway.health import HealthMonitor
    from appliance.web import admin_health

    app.blueprint(admin_health.bp)

    @app.after_server_start
    async def start_health(app: Sanic) -> None:
        app.ctx.health = HealthMonitor(app.ctx.rt)
        app.ctx.health.start()

    @app.before_server_stop
    async def stop_health(app: Sanic) -> None:
        monitor = getattr(app.ctx, "health", None)
        if monitor is not None:
            await monitor.aclose()

    # end of health probes

    # semantic search (issue 7): background backfill and the search admin routes
    from appliance.gateway.backfill import BackfillTask
    from appliance.web import admin_search

    app.blueprint(admin_search.bp)

    @app.after_server_start
    async def start_backfill(app: Sanic) -> None:
        app.ctx.backfill = BackfillTask(app.ctx.rt)
        app.ctx.backfill.start()

    @app.before_server_stop
    async def stop_backfill(app: Sanic) -> None:
        task = getattr(app.ctx, "backfill", None)
        if task is not None:
            await task.stop()

    # end of semantic search

    # Legacy HTTP+SSE transport (issue 3 item 10): GET /sse, POST /messages. The blueprint
    # carries its own start/stop listeners; registered after close_runtime so that (stop
    # listeners run in reverse order) open streams end before the runtime closes.
    app.blueprint(sse.bp)

    # Re-sync routes and scheduler; registered after close_runtime so that, stop listeners
    # running in reverse order, the scheduler stops before the runtime closes.
    admin_sync.install(app)
    shutdown.install(app)  # last, so it is the first stop listener: stop taking work
    return app


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
