"""Whom a command acts for: an API key (``--key`` or TOOLSPOKE_API_KEY) or the operator.

With a key, ``search`` and ``call`` see and run exactly what that key may, checked the way
every request is (expiry, revocation, grants); without one they act as the operator, who
owns the data directory and sees everything.
"""

from __future__ import annotations

from typing import Any

import click

from appliance.gateway.admin import keys
from appliance.models import OPERATOR, Principal

KEY = click.option(
    "--key",
    default=None,
    help="Act for this API key (default: TOOLSPOKE_API_KEY): see and call only what it may. "
    "Without a key the command acts as the operator and sees everything.",
)


async def acting(rt: Any, key: str | None) -> Principal:
    if not key and rt.settings.api_key:
        key = rt.settings.api_key.reveal()
    if not key:
        return OPERATOR
    return await keys.authenticate(rt, key)
