"""ES256 JWTs the OAuth client signs: the ``private_key_jwt`` assertion (RFC 7523 §2.2).

Each signature is checked with the public key alone, as the authorization server would.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qsl

import orjson
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from appliance.oauthclient import jose
from appliance.oauthclient.documents import OAuthRefused
from appliance.oauthclient.identity import ClientProfile, PreRegistered
from appliance.secret import Secret
from tests.unit.oauthclient.test_connector import AS, CHALLENGE, PROFILE, World, connector, run


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def verified(token: str, public: ec.EllipticCurvePublicKey) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and claims of ``token``, after its ES256 signature verifies with ``public``."""
    head, body, sig = token.split(".")
    raw = _b64(sig)
    assert len(raw) == 64
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public.verify(der, f"{head}.{body}".encode(), ec.ECDSA(hashes.SHA256()))
    return orjson.loads(_b64(head)), orjson.loads(_b64(body))


def pem_of(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> Secret:
    return Secret(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
    )


def test_a_client_assertion_names_the_client_and_the_server_and_verifies() -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    key = jose.SigningKey.from_pem(pem_of(private))
    token = jose.client_assertion(key, "client-1", AS, now=1000.0).reveal()
    header, claims = verified(token, private.public_key())
    assert header == {"typ": "JWT", "alg": "ES256"}
    assert claims["iss"] == claims["sub"] == "client-1" and claims["aud"] == AS
    assert claims["iat"] == 1000 and claims["exp"] == 1060 and len(claims["jti"]) >= 16
    again = jose.client_assertion(key, "client-1", AS, now=1000.0).reveal()
    assert orjson.loads(_b64(again.split(".")[1]))["jti"] != claims["jti"]  # never replayable
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    with pytest.raises(InvalidSignature):
        verified(token, other)


def test_a_key_that_is_not_p256_or_not_pem_is_refused_without_quoting_it() -> None:
    for bad in (pem_of(rsa.generate_private_key(65537, 2048)), Secret("-----BEGIN nonsense")):
        with pytest.raises(OAuthRefused) as caught:
            jose.SigningKey.from_pem(bad)
        assert "BEGIN" not in str(caught.value)
    assert "PRIVATE" not in repr(jose.SigningKey.generate())


def test_the_connector_authenticates_a_client_credentials_grant_with_private_key_jwt() -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    world = World()
    world.metadata["token_endpoint_auth_methods_supported"] = ["private_key_jwt"]
    pre = PreRegistered(issuer=AS, client_id="robot", private_key=pem_of(private), grant="client_credentials")
    conn = connector(world, profile=ClientProfile(PROFILE.redirect_uri, None, (pre,)))
    assert run(conn.challenged(401, CHALLENGE, {})) is True
    form = dict(parse_qsl(world.seen[-1][2].decode()))
    assert form["grant_type"] == "client_credentials" and form["client_id"] == "robot"
    assert form["client_assertion_type"] == jose.ASSERTION_TYPE
    _, claims = verified(form["client_assertion"], private.public_key())
    assert claims["iss"] == "robot" and claims["aud"] == AS
    assert "client_secret" not in form


def test_a_key_is_never_offered_to_a_server_that_does_not_take_private_key_jwt() -> None:
    world = World()  # client_secret_basic only
    pre = PreRegistered(
        issuer=AS, client_id="robot", private_key=pem_of(ec.generate_private_key(ec.SECP256R1()))
    )
    conn = connector(world, profile=ClientProfile(PROFILE.redirect_uri, None, (pre,)))
    with pytest.raises(OAuthRefused):
        run(conn.challenged(401, CHALLENGE, {}))
    assert "POST /token" not in world.paths()
