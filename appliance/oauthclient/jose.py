"""Signed JWTs for the OAuth client: ES256 only, the room's one ``cryptography`` import.

Two uses: a ``private_key_jwt`` client assertion (RFC 7523 §2.2, the operator's key, given
as PKCS#8 PEM) and DPoP proofs (RFC 9449, a key pair made per connection and never stored).
``dpop_proof`` builds one proof (RFC 9449 §4.2) per request. A ``SigningKey`` keeps its
private half to itself: its ``repr`` says nothing, and the only things that leave it are
signatures and the public JWK.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from typing import Any
from urllib.parse import urlsplit

import orjson
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from appliance.oauthclient.documents import OAuthRefused
from appliance.secret import Secret

ALGORITHM = "ES256"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
ASSERTION_LIFETIME_S = 60  # short: the assertion is for this one token request


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _json(value: dict[str, Any]) -> str:
    return b64url(orjson.dumps(value))


class SigningKey:
    """A P-256 private key that signs JWTs with ES256."""

    __slots__ = ("_key",)

    def __init__(self, key: ec.EllipticCurvePrivateKey) -> None:
        if not isinstance(key.curve, ec.SECP256R1):
            raise OAuthRefused("the signing key is not a P-256 key (ES256 needs one)", step="token")
        self._key = key

    def __repr__(self) -> str:
        return "SigningKey(ES256)"

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(ec.generate_private_key(ec.SECP256R1()))

    @classmethod
    def from_pem(cls, pem: Secret) -> SigningKey:
        """The key of a PKCS#8 (or SEC 1) PEM; the refusal never quotes the PEM."""
        try:
            key = serialization.load_pem_private_key(pem.reveal().encode(), password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise OAuthRefused("the client's private key is not a readable PEM key", step="token") from exc
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise OAuthRefused("the client's private key is not an EC key (ES256 needs P-256)", step="token")
        return cls(key)

    def public_jwk(self) -> dict[str, str]:
        """The public half as a JWK (RFC 7518 §6.2.1), members in thumbprint order."""
        numbers = self._key.public_key().public_numbers()
        return {
            "crv": "P-256",
            "kty": "EC",
            "x": b64url(numbers.x.to_bytes(32, "big")),
            "y": b64url(numbers.y.to_bytes(32, "big")),
        }

    def thumbprint(self) -> str:
        """RFC 7638 JWK thumbprint (SHA-256) of the public key."""
        canonical = orjson.dumps(self.public_jwk(), option=orjson.OPT_SORT_KEYS)
        return b64url(hashlib.sha256(canonical).digest())

    def sign(self, header: dict[str, Any], claims: dict[str, Any]) -> str:
        """A compact JWS of ``claims`` with ``alg: ES256`` added to ``header``."""
        signing_input = f"{_json({**header, 'alg': ALGORITHM})}.{_json(claims)}"
        der = self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return f"{signing_input}.{b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def client_assertion(key: SigningKey, client_id: str, audience: str, now: float | None = None) -> Secret:
    """RFC 7523 §3: iss and sub the client, aud the authorization server, short-lived, unique."""
    issued = int(time.time() if now is None else now)
    claims = {
        "iss": client_id,
        "sub": client_id,
        "aud": audience,
        "iat": issued,
        "exp": issued + ASSERTION_LIFETIME_S,
        "jti": secrets.token_urlsafe(16),
    }
    return Secret(key.sign({"typ": "JWT"}, claims))


def htu(url: str) -> str:
    """The request's URL without its query and fragment (RFC 9449 §4.2)."""
    return urlsplit(url)._replace(query="", fragment="").geturl()


def dpop_proof(
    key: SigningKey,
    method: str,
    url: str,
    *,
    access_token: Secret | None = None,
    nonce: str | None = None,
    now: float | None = None,
) -> str:
    """A fresh DPoP proof for one request: a new ``jti`` each time, ``ath`` with a token."""
    claims: dict[str, Any] = {
        "jti": secrets.token_urlsafe(16),
        "htm": method.upper(),
        "htu": htu(url),
        "iat": int(time.time() if now is None else now),
    }
    if access_token is not None:  # RFC 9449 §4.2: base64url(SHA-256(ASCII(token)))
        claims["ath"] = b64url(hashlib.sha256(access_token.reveal().encode("ascii")).digest())
    if nonce is not None:
        claims["nonce"] = nonce
    return key.sign({"typ": "dpop+jwt", "jwk": key.public_jwk()}, claims)
