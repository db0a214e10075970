"""ES256 JWTs the OAuth client signs: the ``private_key_jwt`` assertion (RFC 7523 §2.2) and
DPoP proofs (RFC 9449), on token requests (with the bounded nonce retry) and on MCP requests.

Each signature is checked with the public key alone, as the authorization server would.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any
from urllib.parse import parse_qsl

import orjson
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from appliance.oauthclient import discovery, flow, jose
from appliance.oauthclient.documents import OAuthRefused
from appliance.oauthclient.identity import ClientIdentity, ClientProfile, PreRegistered
from appliance.secret import Secret
from tests.unit.oauthclient.test_connector import AS, CHALLENGE, MCP, PROFILE, World, connector, js, run


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


# -- DPoP (RFC 9449) ------------------------------------------------------------------------------


def public_of(jwk: dict[str, Any]) -> ec.EllipticCurvePublicKey:
    assert set(jwk) == {"kty", "crv", "x", "y"}  # never a private member (d)
    x, y = (int.from_bytes(_b64(jwk[k]), "big") for k in ("x", "y"))
    return ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()


def proof_of(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A proof's header and claims, verified with the public key its own header carries."""
    header = orjson.loads(_b64(token.split(".")[0]))
    return verified(token, public_of(header["jwk"]))


def test_a_dpop_proof_names_the_request_and_the_token_and_verifies_with_its_jwk() -> None:
    key = jose.SigningKey.generate()
    token = Secret("the-access-token")
    one = jose.dpop_proof(
        key, "post", "https://mcp.test/mcp?x=1#f", access_token=token, nonce="n-1", now=1000
    )
    header, claims = proof_of(one)
    assert header["typ"] == "dpop+jwt" and header["alg"] == "ES256" and header["jwk"] == key.public_jwk()
    assert claims["htm"] == "POST" and claims["htu"] == "https://mcp.test/mcp" and claims["iat"] == 1000
    assert claims["ath"] == jose.b64url(hashlib.sha256(b"the-access-token").digest())
    assert claims["nonce"] == "n-1" and "the-access-token" not in one
    _, again = proof_of(jose.dpop_proof(key, "POST", "https://as.test/token"))
    assert again["jti"] != claims["jti"] and "ath" not in again and "nonce" not in again
    assert len(key.thumbprint()) == 43  # base64url of a SHA-256


class TokenEndpoint:
    """``flow.post`` replaced: records each token request, answers from a script."""

    def __init__(self, *answers: dict[str, Any] | OAuthRefused) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[str, dict[str, str], dict[str, str]]] = []

    async def __call__(self, egress: Any, url: str, step: str, **kw: Any) -> dict[str, Any]:
        self.sent.append((url, kw["form"], dict(kw["headers"])))
        answer = self.answers.pop(0)
        if isinstance(answer, OAuthRefused):
            raise answer
        return answer


def nonce_refusal(nonce: str | None) -> OAuthRefused:
    refused = OAuthRefused("refused", step="token request", error="use_dpop_nonce")
    refused.dpop_nonce = nonce
    return refused


SERVER = discovery.ServerMetadata(AS, f"{AS}/authorize", f"{AS}/token", dpop_algs=("ES256",))
IDENTITY = ClientIdentity("c1", None, "none", "dcr", AS, "client_credentials")


def test_the_token_request_carries_a_proof_and_retries_once_with_the_servers_nonce(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint = TokenEndpoint(nonce_refusal("as-nonce"), {"access_token": "at", "token_type": "DPoP"})
    monkeypatch.setattr(flow, "post", endpoint)
    dpop = flow.Dpop()
    tokens = run(flow.client_credentials(None, SERVER, IDENTITY, MCP, (), dpop))  # type: ignore[arg-type]
    assert tokens.kind == "DPoP" and len(endpoint.sent) == 2
    first, second = (proof_of(headers["DPoP"])[1] for _, _, headers in endpoint.sent)
    assert first["htm"] == "POST" and first["htu"] == f"{AS}/token" and "nonce" not in first
    assert second["nonce"] == "as-nonce" and second["jti"] != first["jti"]


def test_the_nonce_retry_is_bounded_and_a_dpop_token_needs_a_proof(monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = TokenEndpoint(nonce_refusal("n1"), nonce_refusal("n2"), nonce_refusal("n3"))
    monkeypatch.setattr(flow, "post", endpoint)
    with pytest.raises(OAuthRefused):
        run(flow.client_credentials(None, SERVER, IDENTITY, MCP, (), flow.Dpop()))  # type: ignore[arg-type]
    assert len(endpoint.sent) == 2  # one retry, whatever the server keeps asking
    endpoint = TokenEndpoint(nonce_refusal("n1"))
    monkeypatch.setattr(flow, "post", endpoint)
    with pytest.raises(OAuthRefused):  # without DPoP a nonce challenge is just a refusal
        run(flow.client_credentials(None, SERVER, IDENTITY, MCP, ()))  # type: ignore[arg-type]
    assert len(endpoint.sent) == 1 and "DPoP" not in endpoint.sent[0][2]
    with pytest.raises(OAuthRefused):  # a DPoP token we did not ask for is refused
        flow.tokens_from({"access_token": "at", "token_type": "DPoP"}, "here", (), 0.0)


def test_the_connector_presents_a_dpop_token_with_a_fresh_proof_and_answers_a_nonce_once() -> None:
    world = World()
    world.metadata["dpop_signing_alg_values_supported"] = ["ES256"]
    world.routes["POST /token"] = lambda _: js(
        {"access_token": "at-d", "token_type": "DPoP", "expires_in": 600}
    )
    conn = connector(world)
    assert run(
        conn.challenged(
            401, 'DPoP resource_metadata="https://mcp.test/.well-known/oauth-protected-resource/mcp"', {}
        )
    )
    sent = run(conn.headers("POST", MCP))
    assert sent["Authorization"] == "DPoP at-d"
    _, claims = proof_of(sent["DPoP"])
    assert claims["htu"] == MCP and claims["ath"] == jose.b64url(hashlib.sha256(b"at-d").digest())
    challenge = 'DPoP error="use_dpop_nonce"'
    assert run(conn.challenged(401, challenge, sent, "rs-nonce")) is True
    again = run(conn.headers("POST", MCP))
    assert proof_of(again["DPoP"])[1]["nonce"] == "rs-nonce"
    assert run(conn.challenged(401, challenge, again, "rs-nonce")) is False  # the same nonce: no loop
    assert conn.authorizations == 1
