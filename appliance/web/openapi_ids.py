"""The admin API document's operation ids: one per method and path, derived from the route.

``web/admin_openapi.py`` stamps them on every path item it publishes (its own and the
ledger's), so client generators keep their names across releases.
"""

from __future__ import annotations

from typing import Any

_METHODS = ("get", "put", "post", "delete", "patch")


def operation_id(method: str, path: str) -> str:
    """``get_toolkits_by_slug_calls`` for GET /api/v1/toolkits/{slug}/calls: stable (a function
    of the route alone, so client generators keep their names across releases) and unique (one
    per method and path; a parameter is ``by_<name>`` so it cannot meet a literal segment)."""
    words = [method]
    for segment in path.removeprefix("/api/v1/").split("/"):
        name = segment.strip("{}")
        words.append(f"by_{name}" if segment.startswith("{") else name)
    return "_".join(w.replace("-", "_").replace(".", "_") for w in words)


def with_ids(paths: dict[str, Any]) -> dict[str, Any]:
    # Copied, not set in place: one operation object may serve two paths (an alias).
    return {
        path: {
            key: {**value, "operationId": operation_id(key, path)} if key in _METHODS else value
            for key, value in item.items()
        }
        for path, item in paths.items()
    }
