"""The ``toolspoke`` command. Thin: parses, builds Settings, calls the gateway or the web app.

One module per command group; each registers its commands on the group in ``common`` when
imported, so importing this package yields the whole command.
"""

from __future__ import annotations

from appliance.cli import (
    access,
    approvals,
    backup,
    catalogue,
    code,
    connections,
    doctor,
    imports,
    ledger,
    semantic,
    serving,
    vault,
)
from appliance.cli.common import main

__all__ = [
    "access",
    "approvals",
    "backup",
    "catalogue",
    "code",
    "connections",
    "doctor",
    "imports",
    "ledger",
    "main",
    "semantic",
    "serving",
    "vault",
]
