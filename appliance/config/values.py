"""How a setting's raw value (a TOML value or an environment string) becomes its typed value.

Each parser raises ``ValueError`` with a short reason; ``load`` turns that into a ``ConfigError``
naming the setting and where its value came from. Bounds live here, beside the type, so that a
setting's declaration states both at once.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from appliance.secret import Secret


def boolean(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true/false, got {raw!r}")


def csv_list(raw: Any) -> tuple[str, ...]:
    items = [str(x) for x in raw] if isinstance(raw, list | tuple) else str(raw).split(",")
    return tuple(x.strip() for x in items if x.strip())


def cidrs(raw: Any) -> tuple[str, ...]:
    out = []
    for item in csv_list(raw):
        if item in ("*", "0.0.0.0/0", "::/0"):
            # A wildcard would switch the SSRF guard off; name each network instead.
            raise ValueError(f"{item!r} would allow every address; list the networks you mean")
        out.append(str(ipaddress.ip_network(item, strict=False)))
    return tuple(out)


def abs_paths(raw: Any) -> tuple[str, ...]:
    paths = csv_list(raw)
    for path in paths:
        if not os.path.isabs(path) or "\0" in path:
            raise ValueError(f"{path!r} is not an absolute path")
    return tuple(os.path.normpath(p) for p in paths)


def proxy_url(raw: Any) -> str:
    """Empty, or ``http://host:port`` (a CONNECT proxy: no credentials, no path)."""
    text = str(raw).strip()
    if not text:
        return ""
    scheme, sep, rest = text.partition("://")
    host, _, port_text = rest.rstrip("/").rpartition(":")
    if scheme != "http" or not sep or not host or "@" in rest or "/" in host or not port_text.isdigit():
        raise ValueError(f"{text!r} is not http://host:port")
    port(port_text)
    return f"http://{host}:{int(port_text)}"


def base_url(raw: Any) -> str | None:
    """Empty, or an absolute http(s) URL without credentials, query or fragment (no trailing /)."""
    text = str(raw).strip().rstrip("/")
    if not text:
        return None
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 (raises on a malformed port)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a URL") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{text!r} is not an http(s) URL")
    if "@" in parts.netloc or parts.query or parts.fragment or "?" in text or "#" in text:
        raise ValueError(f"{text!r} must not carry credentials, a query or a fragment")
    return text


def client_id_url(raw: Any) -> str | None:
    """Empty, or an https URL with a path (an OAuth Client ID Metadata Document's URL)."""
    text = base_url(raw)
    if text is None:
        return None
    parts = urlsplit(text)
    if parts.scheme != "https" or parts.path in ("", "/"):
        raise ValueError(f"{text!r} is not an https URL with a path")
    return text


def port(raw: Any) -> int:
    value = int(raw)
    if not 0 <= value <= 65535:
        raise ValueError("must be between 0 and 65535")
    return value


def positive(kind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def parse(raw: Any) -> Any:
        value = kind(raw)
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value

    return parse


def non_negative(kind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def parse(raw: Any) -> Any:
        value = kind(raw)
        if value < 0:
            raise ValueError("must be 0 or greater")
        return value

    return parse


def at_least(floor: float) -> Callable[[Any], float]:
    def parse(raw: Any) -> float:
        value = float(raw)
        if not value >= floor:  # NaN too
            raise ValueError(f"must be at least {floor:g}")
        return value

    return parse


def between(floor: float, ceiling: float) -> Callable[[Any], float]:
    def parse(raw: Any) -> float:
        value = float(raw)
        if not floor <= value <= ceiling:  # NaN too
            raise ValueError(f"must be between {floor:g} and {ceiling:g}")
        return value

    return parse


def secret(raw: Any) -> Secret:
    return Secret(str(raw))


def stripped_secret(raw: Any) -> Secret:
    return Secret(str(raw).strip())


def upper(raw: Any) -> str:
    return str(raw).upper()


def metrics_key(raw: Any) -> Secret:
    value = str(raw).strip()
    if len(value) < 16:  # a guessable key would make the check decoration
        raise ValueError("must be at least 16 characters")
    return Secret(value)


def synchronous(raw: Any) -> str:
    value = str(raw).strip().upper()
    if value not in ("FULL", "NORMAL"):
        raise ValueError("must be FULL or NORMAL")
    return value


def choice(*allowed: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        value = str(raw).strip().lower()
        if value not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {raw!r}")
        return value

    return parse
