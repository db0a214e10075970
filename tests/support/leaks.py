"""How a secret can leak, written independently of ``appliance/secret.py``'s needles.

``leak_text`` is what a hostile upstream says: the secret plain, URL-encoded (both escape
cases), JSON-escaped, hex (both cases), and base64 in both alphabets, padded and not, alone
and inside a longer encoded string (``user:<secret>``, ``:<secret>``, ``::<secret>``, so at
every alignment). ``tells`` are the substrings that give a secret away in any of those:
for base64 inside a longer string, the characters that depend on the secret's bytes alone.
"""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus

PREFIXES = ("", "user:", ":", "::")  # offsets 0, 2 (5 % 3), 1, 2 within the encoded bytes


def _b64(raw: bytes) -> list[str]:
    std = base64.b64encode(raw).decode()
    safe = base64.urlsafe_b64encode(raw).decode()
    return [std, std.rstrip("="), safe, safe.rstrip("=")]


def encodings(secret: str) -> list[str]:
    raw = secret.encode()
    out = [
        secret,
        quote(secret, safe=""),
        quote(secret, safe="").replace("%2F", "%2f").replace("%3D", "%3d"),
        quote_plus(secret),
        json.dumps(secret)[1:-1],
        raw.hex(),
        raw.hex().upper(),
    ]
    for prefix in PREFIXES:
        out += _b64(prefix.encode() + raw)
        out += _b64(prefix.encode() + raw + b"@tail")  # followed by more bytes
    return out


def leak_text(*secrets: str) -> str:
    return " | ".join(e for s in secrets for e in encodings(s))


def tells(secret: str) -> list[str]:
    raw = secret.encode()
    out = [secret, quote(secret, safe=""), raw.hex(), raw.hex().upper()]
    for offset in range(3):
        # The first group holds the offset's other bytes, the last one what follows: the
        # characters between depend on the secret alone.
        middle = base64.b64encode(b"\0" * offset + raw).decode()[4:-4]
        out += [middle, middle.replace("+", "-").replace("/", "_")]
    return [t for t in out if len(t) >= 8]


def leaked(text: str, *secrets: str) -> list[str]:
    """The tells of ``secrets`` found in ``text`` (shortened, for an assertion message)."""
    return [t[:12] + "…" for s in secrets for t in tells(s) if t in text]


def assert_no_leak(text: str, *secrets: str, where: str = "") -> None:
    found = leaked(text, *secrets)
    assert not found, f"a form of a secret leaked {where}: {found}"
