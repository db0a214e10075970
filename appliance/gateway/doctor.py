"""``toolspoke doctor``: what this machine offers the gateway, and what it will do with it.

Today that is the stdio sandbox (``children/sandbox.py``): whether bubblewrap and the
util-linux helpers are there and really create namespaces, the mode the settings ask for,
and so what a stdio server gets: a sandbox, a plain process with a warning, or a refusal.
"""

from __future__ import annotations

import os
from typing import Any

from appliance.children.disk import probe_disk
from appliance.children.sandbox import INSTALL_HINT, from_settings, probed
from appliance.config import Settings


def report(settings: Settings) -> dict[str, Any]:
    """The facts and the verdict, as plain data (the CLI prints it as text or JSON)."""
    found = probed()
    sandbox, refusal = from_settings(settings)
    if sandbox is not None:
        verdict = "sandboxed"
    elif refusal:
        verdict = "refused"
    else:
        verdict = "off" if settings.stdio_sandbox == "off" else "unsandboxed"
    root = os.geteuid() == 0
    return {
        "stdio_sandbox": {
            "mode": settings.stdio_sandbox,
            "stdio_servers": verdict,
            "available": found.available,
            "detail": found.detail,
            "bwrap": found.bwrap,
            "prlimit": found.prlimit,
            "setpriv": found.setpriv,
            "running_as_root": root,
            "uids": f"{settings.stdio_sandbox_uid_base}+ (one per toolkit)" if root else "the gateway's own",
            "nested_user_namespaces": "refused" if found.disable_userns else "allowed",
            "network": "none (its own loopback only)",
            # A toolkit's allowed hosts: through the egress proxy, which the guard decides.
            "egress_proxy": {
                "allowed_hosts": "available" if found.proxied else "unavailable (python3 not found)",
                "forwarder_python": found.python,
                "install_hosts": list(settings.stdio_install_hosts),
                "upstream_proxy": settings.stdio_egress_upstream_proxy or "none (direct)",
                "connections_per_server": settings.stdio_egress_connections,
                "idle_s": settings.stdio_egress_idle_s,
                "allowed_tool_cidrs": list(settings.allowed_tool_cidrs),
            },
            "limits": {
                "memory_mb": settings.stdio_sandbox_memory_mb,
                "cpu_s": settings.stdio_sandbox_cpu_s,
                "processes": settings.stdio_sandbox_processes,
                "open_files": settings.stdio_sandbox_open_files,
                "file_mb": settings.stdio_sandbox_file_mb,
                "tmp_mb": settings.stdio_sandbox_tmp_mb,
            },
            "read_paths": list(settings.stdio_sandbox_read_paths),
            # The total bound on a toolkit's work directory and HOME (children/disk.py).
            "disk": {
                "megabytes_each": settings.stdio_sandbox_disk_mb,
                "possible": probe_disk() or "yes (loop-mounted ext4 images)",
                "bound": "on" if sandbox is not None and sandbox.disk is not None else "off",
            },
            "hint": "" if found.available else INSTALL_HINT,
        }
    }
