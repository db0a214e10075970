"""Talking to authorization servers and metadata endpoints: strict, bounded, never redirected.

Metadata is attacker-controlled, so every URL it names goes through ``Egress`` (the SSRF
guard resolves, checks and pins the address; redirects are refused there, never followed),
answers are capped at ``MAX_DOCUMENT`` bytes, must be a JSON object, and nothing they say is
quoted back but a well-formed OAuth ``error`` code: an answer may echo the secrets we sent.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode, urlsplit

import orjson

from appliance.egress.transport import Egress, HttpResponse
from appliance.errors import UpstreamError

MAX_DOCUMENT = 65536  # metadata, registration and token answers are a few hundred bytes
_ERROR_CODE = re.compile(r"[a-z_]{1,40}")
_JSON = re.compile(r"application/(?:[\w.+-]+\+)?json", re.IGNORECASE)


class OAuthRefused(UpstreamError):
    """An OAuth step failed; ``step`` names which (discovery, registration, token, ...).

    Nothing was stored: the connector keeps a token only after every check passed.
    """

    def __init__(self, message: str, *, step: str, **data: Any) -> None:
        super().__init__(message, reason="credential_unavailable", data={"step": step, **data})
        self.step = step
        self.error: str | None = data.get("error")  # a well-formed OAuth error code, if any
        self.dpop_nonce: str | None = None  # a refusal's DPoP-Nonce header (RFC 9449 §8), kept apart


def host_of(url: str) -> str:
    try:
        return urlsplit(url).hostname or "(no host)"
    except ValueError:
        return "(invalid URL)"


async def _exchange(egress: Egress, method: str, url: str, step: str, **kw: Any) -> HttpResponse:
    try:
        return await egress.send(method, url, max_bytes=MAX_DOCUMENT, **kw)
    except UpstreamError as exc:
        if isinstance(exc, OAuthRefused):
            raise
        # The guard's and the transport's reasons are already client-safe (no query string).
        raise OAuthRefused(
            f"OAuth {step} at {host_of(url)} failed: {exc.public_message}", step=step, cause=exc.reason
        ) from exc


def _document(answer: HttpResponse) -> dict[str, Any] | None:
    try:
        doc = orjson.loads(answer.body) if answer.body else None
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        return None
    return doc


async def get_json(egress: Egress, url: str, step: str) -> dict[str, Any] | None:
    """A metadata document; None when there is none there (4xx), else OAuthRefused."""
    answer = await _exchange(egress, "GET", url, step, headers={"Accept": "application/json"})
    if 400 <= answer.status < 500:
        return None
    if answer.status != 200:
        raise OAuthRefused(
            f"OAuth {step} at {host_of(url)} answered HTTP {answer.status}", step=step, status=answer.status
        )
    kind = answer.headers.get("content-type", "").split(";")[0].strip()
    doc = _document(answer)
    if doc is None or not _JSON.fullmatch(kind):
        raise OAuthRefused(f"OAuth {step} at {host_of(url)} is not a JSON object", step=step)
    return doc


async def post(
    egress: Egress,
    url: str,
    step: str,
    *,
    form: dict[str, str] | None = None,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    ok: tuple[int, ...] = (200,),
) -> dict[str, Any]:
    """POST a form (token endpoint) or a JSON body (registration); the JSON object answered."""
    out = {"Accept": "application/json", **(headers or {})}
    if form is not None:
        out["Content-Type"] = "application/x-www-form-urlencoded"
        content = urlencode(form).encode()
    else:
        out["Content-Type"] = "application/json"
        content = orjson.dumps(body or {})
    answer = await _exchange(egress, "POST", url, step, headers=out, content=content)
    doc = _document(answer)
    if answer.status not in ok:
        code = doc.get("error") if doc is not None else None
        well_formed = isinstance(code, str) and bool(_ERROR_CODE.fullmatch(code))
        refused = OAuthRefused(
            f"OAuth {step} at {host_of(url)} was refused: HTTP {answer.status}"
            + (f" ({code})" if well_formed else ""),
            step=step,
            status=answer.status,
            **({"error": code} if well_formed else {}),
        )
        refused.dpop_nonce = answer.headers.get("dpop-nonce")
        raise refused
    if doc is None:
        raise OAuthRefused(f"OAuth {step} at {host_of(url)} answered no JSON object", step=step)
    return doc
