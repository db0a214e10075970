"""The admin API's checks of body fields and query parameters, each error naming the field."""

from __future__ import annotations

from typing import Any

from sanic import Request

from appliance.errors import InvalidParams


def flag(doc: dict[str, Any], key: str) -> bool | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, bool):
        raise InvalidParams(f"'{key}' must be true or false", field=key)
    return value


MAX_ID = 2**63 - 1  # SQLite's largest integer


def positive_id(doc: dict[str, Any], key: str) -> int | None:
    value = doc.get(key)
    if value is not None and (
        not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_ID
    ):
        raise InvalidParams(f"'{key}' must be a positive integer id", field=key)
    return value


def query_id(request: Request, key: str) -> int | None:
    raw = request.args.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidParams(f"query parameter '{key}' must be an integer id", field=key) from None
    if not 1 <= value <= MAX_ID:
        raise InvalidParams(f"query parameter '{key}' must be a positive integer id", field=key)
    return value


def only(doc: dict[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(doc) - allowed)
    if extra:
        raise InvalidParams(
            f"unknown field {extra[0]!r}; expected {', '.join(sorted(allowed))}", field=extra[0]
        )
