"""Elicitation (client/elicitation.mdx, 2025-11-25 and 2026-07-28): what a client declared,
and the shapes a server asks with.

A 2025-era server sends ``elicitation/create`` as a request during the client's request; a
2026-07-28 server answers the client's request with an ``input_required`` result whose
``inputRequests`` carry it, and the client retries with ``inputResponses`` and the echoed
``requestState`` (basic/patterns/mrtr.mdx).
"""

from __future__ import annotations

from typing import Any

METHOD = "elicitation/create"
INPUT_REQUIRED = "input_required"
INPUT_RESPONSES = "inputResponses"
REQUEST_STATE = "requestState"
URL_ELICITATION_REQUIRED = -32042  # 2025-11-25: a request that waits for a URL-mode elicitation


def asks_forms(capabilities: Any) -> bool:
    """Whether ``capabilities`` (a client's, as declared) take form-mode elicitation: an
    ``elicitation`` object that is empty (form only, for backwards compatibility) or names
    ``form``."""
    declared = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
    if not isinstance(declared, dict):
        return False
    return not declared or isinstance(declared.get("form"), dict)


def asks_urls(capabilities: Any) -> bool:
    """Whether ``capabilities`` take URL-mode elicitation: an ``elicitation`` object naming
    ``url`` (an empty one means form only)."""
    declared = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
    return isinstance(declared, dict) and isinstance(declared.get("url"), dict)


def url_params(url: str, message: str, elicitation_id: str | None = None) -> dict[str, Any]:
    """A URL-mode elicitation's params (2025-11-25 names each with an ``elicitationId``;
    2026-07-28 has none: the retry's ``requestState`` says which it was)."""
    params: dict[str, Any] = {"mode": "url", "message": message, "url": url}
    if elicitation_id is not None:
        params["elicitationId"] = elicitation_id
    return params


def input_required(key: str, params: dict[str, Any], state: str) -> dict[str, Any]:
    """An ``input_required`` result asking one elicitation (form or URL mode) under ``key``."""
    return {
        "resultType": INPUT_REQUIRED,
        "inputRequests": {key: {"method": METHOD, "params": params}},
        REQUEST_STATE: state,
    }
