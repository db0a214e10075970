"""Is an HTTP upstream's host reachable? DNS through the egress guard, then a bare TCP connect.

This is how OpenAPI toolkits are health-checked (RELIABILITY D-10). An HTTP request, even a
HEAD or GET of the base URL, is not safe in general: an API may route it to an operation
with side effects, charge for it, or count it against the owner's quota. A TCP handshake
sends no application bytes, so it cannot act on anything; it proves only that the host
resolves to an allowed address and accepts connections, which is what "broken" is about.
"""

from __future__ import annotations

import asyncio
import contextlib

from appliance.egress.guard import host_port
from appliance.egress.transport import Egress
from appliance.errors import UpstreamError


async def tcp_reachable(egress: Egress, url: str, *, timeout_s: float) -> None:
    """Return when some allowed address of ``url``'s host accepts a connection; else raise.

    The guard resolves and vets every address (``ssrf_blocked`` on a refusal), exactly as a
    real call would; the connection is closed at once, before TLS.
    """
    checked = egress.check_url(url)
    if egress.is_local(checked):
        return  # answered in this process (the demo API): nothing to connect to
    host, port = host_port(checked)
    try:
        async with asyncio.timeout(timeout_s):
            addresses = await egress.policy.resolve(host, port)
            last: OSError | None = None
            for address in addresses:
                try:
                    _, writer = await asyncio.open_connection(str(address), port)
                except OSError as exc:
                    last = exc
                    continue
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
                return
    except TimeoutError:
        raise UpstreamError(
            f"{host}:{port} did not accept a connection within {timeout_s:g} s", reason="upstream_timeout"
        ) from None
    reason = last.strerror if last is not None and last.strerror else "connection failed"
    raise UpstreamError(f"{host}:{port} refused the connection ({reason})", reason="upstream_unavailable")
