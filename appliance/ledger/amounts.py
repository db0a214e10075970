"""Credit amounts: integers in millicredits inside, plain JSON numbers outside.

Integers make sums exact (ten fees of 0.1 fill a ceiling of 1.0 exactly; floats stop at
nine). Parsing is strict because hostile numbers are the classic way past a ceiling: NaN
compares false with everything, so ``used >= limit`` would never block (RELIABILITY LEDGER-09).
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from typing import Any

from appliance.errors import InvalidParams

MILLI = 1000
MAX_CREDITS = 10**12  # far below SQLite's 64-bit range even in millicredits


def parse_credits(raw: Any, field: str, *, allow_negative: bool = False) -> int:
    """A JSON number of credits (at most 3 decimals) → millicredits; errors name ``field``."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise InvalidParams(f"'{field}' must be a number of credits", field=field)
    if isinstance(raw, float) and not math.isfinite(raw):
        raise InvalidParams(f"'{field}' must be a finite number", field=field)
    try:
        value = Decimal(raw) if isinstance(raw, int) else Decimal(repr(raw))
    except InvalidOperation:
        raise InvalidParams(f"'{field}' must be a number of credits", field=field) from None
    if abs(value) > MAX_CREDITS:
        raise InvalidParams(f"'{field}' must be at most {MAX_CREDITS} credits", field=field)
    if value < 0 and not allow_negative:
        raise InvalidParams(f"'{field}' must be 0 or more", field=field)
    milli = value * MILLI
    if milli != milli.to_integral_value():
        raise InvalidParams(f"'{field}' has more than 3 decimal places", field=field)
    return int(milli)


def parse_count(raw: Any, field: str) -> int:
    """A whole, non-negative number of calls (0: no ceiling)."""
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= MAX_CREDITS:
        raise InvalidParams(f"'{field}' must be a whole number of calls from 0 to {MAX_CREDITS}", field=field)
    return raw


def credits(milli: int) -> int | float:
    """Millicredits as the number people read: 1500 → 1.5, 2000 → 2."""
    whole, rest = divmod(milli, MILLI)
    return whole if rest == 0 else milli / MILLI
