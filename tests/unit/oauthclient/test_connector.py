"""The OAuth connector against a scripted upstream and authorization server, in process.

The servers are ``Egress.serve_locally`` services (no sockets); anything else goes through
the real guard. A hostile authorization server (metadata naming internal addresses, an
issuer that is not its own, a token endpoint that redirects, oversized or malformed
answers) is refused with a clear reason, before any code or token is sent or kept. The
honest path, refresh ahead of expiry and once on a 401, and bounded step-up are here too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import orjson
import pytest

from appliance.egress.guard import EgressPolicy
from appliance.egress.transport import Egress
from appliance.oauthclient.connector import OAuthConnector
from appliance.oauthclient.documents import OAuthRefused
from appliance.oauthclient.flow import ID_JAG, Pending
from appliance.oauthclient.identity import JWT_BEARER, ClientProfile, EnterpriseIdp, PreRegistered
from appliance.secret import Secret
from tests.support.recording_upstream import serving

T = TypeVar("T")
MCP = "https://mcp.test/mcp"
AS = "https://as.test"
PROFILE = ClientProfile(redirect_uri="https://toolspoke.test/oauth/callback")
CHALLENGE = (
    'Bearer resource_metadata="https://mcp.test/.well-known/oauth-protected-resource/mcp", scope="read"'
)
Reply = tuple[int, dict[str, str], bytes]


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        async with asyncio.timeout(10):
            return await coro

    return asyncio.run(main())


def js(doc: Any, status: int = 200) -> Reply:
    return status, {"content-type": "application/json"}, orjson.dumps(doc)


class World:
    """An MCP server's metadata and its authorization server, each route replaceable."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bytes]] = []
        self.tokens_issued = 0
        self.metadata: dict[str, Any] = {
            "issuer": AS,
            "authorization_endpoint": f"{AS}/authorize",
            "token_endpoint": f"{AS}/token",
            "registration_endpoint": f"{AS}/register",
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic"],
        }
        self.routes: dict[str, Callable[[bytes], Reply]] = {
            "GET /.well-known/oauth-protected-resource/mcp": lambda _: js(
                {"resource": MCP, "authorization_servers": [AS]}
            ),
            "GET /.well-known/oauth-authorization-server": lambda _: js(self.metadata),
            "POST /register": lambda _: js({"client_id": "c1", "client_secret": "s3cret-client"}, 201),
            "POST /token": self.token,
        }

    def token(self, body: bytes) -> Reply:
        self.tokens_issued += 1
        n = self.tokens_issued
        return js(
            {
                "access_token": f"at-{n}",
                "token_type": "Bearer",
                "expires_in": 3600,
                "refresh_token": f"rt-{n}",
            }
        )

    async def serve(self, method: str, target: str, body: bytes) -> Reply:
        path = target.split("?", 1)[0]
        self.seen.append((method, path, body))
        route = self.routes.get(f"{method} {path}")
        return route(body) if route else (404, {}, b"")

    def paths(self) -> list[str]:
        return [f"{m} {p}" for m, p, _ in self.seen]


def egress_for(
    world: World,
    resolver: Callable[[str, int], Awaitable[list[str]]] | None = None,
    allowed: tuple[str, ...] = (),
) -> Egress:
    egress = Egress(EgressPolicy(allowed, resolver=resolver))
    egress.serve_locally("https://mcp.test", world.serve)
    egress.serve_locally(AS, world.serve)
    return egress


class Browser:
    """A person who approves at once: the callback carries the code, state and issuer."""

    def __init__(self, **changes: str | None) -> None:
        self.changes = changes
        self.asked: list[Pending] = []

    async def __call__(self, pending: Pending) -> Mapping[str, str]:
        self.asked.append(pending)
        query = dict(parse_qsl(urlsplit(pending.url).query))
        params = {"code": "the-code", "state": query["state"], "iss": AS}
        for key, value in self.changes.items():
            if value is None:
                params.pop(key, None)
            else:
                params[key] = value
        return params


def connector(world: World, browser: Browser | None = None, **kw: Any) -> OAuthConnector:
    return OAuthConnector(
        egress_for(world, kw.pop("resolver", None)),
        MCP,
        kw.pop("profile", PROFILE),
        browser or Browser(),
        **kw,
    )


def refused(conn: OAuthConnector, header: str = CHALLENGE, status: int = 401) -> OAuthRefused:
    with pytest.raises(OAuthRefused) as caught:
        run(conn.challenged(status, header, {}))
    assert conn.tokens is None  # nothing stored
    return caught.value


# -- the honest path --------------------------------------------------------------------------


def test_a_401_leads_to_discovery_registration_pkce_and_a_bearer_token() -> None:
    world, browser = World(), Browser()
    conn = connector(world, browser)
    assert run(conn.challenged(401, CHALLENGE, {})) is True
    assert run(conn.headers()) == {"Authorization": "Bearer at-1"}
    (pending,) = browser.asked
    query = dict(parse_qsl(urlsplit(pending.url).query))
    assert query["code_challenge_method"] == "S256" and query["resource"] == MCP and query["scope"] == "read"
    assert query["client_id"] == "c1" and query["redirect_uri"] == PROFILE.redirect_uri
    token_form = dict(parse_qsl(world.seen[-1][2].decode()))
    assert token_form["code_verifier"] == pending.verifier.reveal() and token_form["resource"] == MCP
    assert "client_secret" not in token_form  # client_secret_basic: in the header only
    assert world.paths() == [
        "GET /.well-known/oauth-protected-resource/mcp",
        "GET /.well-known/oauth-authorization-server",
        "POST /register",
        "POST /token",
    ]


def test_a_token_is_refreshed_ahead_of_expiry_and_once_on_a_401() -> None:
    now = [1000.0]
    world = World()
    conn = connector(world, clock=lambda: now[0])
    run(conn.challenged(401, CHALLENGE, {}))
    conn.tokens = type(conn.tokens)(Secret("at-1"), 1030.0, Secret("rt-1"), ("read",))  # type: ignore[misc]
    assert run(conn.headers()) == {"Authorization": "Bearer at-2"}  # due within a minute: refreshed
    assert dict(parse_qsl(world.seen[-1][2].decode()))["refresh_token"] == "rt-1"
    assert run(conn.challenged(401, CHALLENGE, {"Authorization": "Bearer at-2"})) is True
    assert run(conn.headers()) == {"Authorization": "Bearer at-3"} and conn.refreshes == 2
    assert len(Browser().asked) == 0 and conn.authorizations == 1  # no person involved again


def test_step_up_asks_for_the_union_once_and_never_for_what_it_already_asked() -> None:
    world, browser = World(), Browser()
    conn = connector(world, browser)
    run(conn.challenged(401, CHALLENGE, {}))
    sent = {"Authorization": "Bearer at-1"}
    more = 'Bearer error="insufficient_scope", scope="write"'
    assert run(conn.challenged(403, more, sent)) is True
    assert browser.asked[-1].scopes == ("read", "write")
    again = {"Authorization": "Bearer at-2"}
    assert run(conn.challenged(403, more, again)) is False  # asked already: a permanent refusal
    assert run(conn.challenged(403, "Bearer error=insufficient_scope", again)) is False
    assert len(browser.asked) == 2


def test_a_pre_registered_client_is_used_only_with_its_own_issuer() -> None:
    world = World()
    pre = PreRegistered(issuer=AS, client_id="mine", client_secret=Secret("pw"))
    conn = connector(world, profile=ClientProfile(PROFILE.redirect_uri, None, (pre,)))
    run(conn.challenged(401, CHALLENGE, {}))
    assert "POST /register" not in world.paths()
    other = PreRegistered(issuer="https://elsewhere.test", client_id="mine", client_secret=Secret("pw"))
    world2 = World()
    conn2 = connector(world2, profile=ClientProfile(PROFILE.redirect_uri, None, (other,)))
    run(conn2.challenged(401, CHALLENGE, {}))
    assert "POST /register" in world2.paths()  # never offered to another server


# -- a hostile authorization server -----------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "rule"),
    [
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://127.0.0.1:8765/api/v1/keys", "loopback"),
        ("http://10.0.0.7/token", "private"),
        ("http://[::ffff:10.0.0.7]/token", "private"),
        ("file:///etc/passwd", "http(s)"),
    ],
)
def test_metadata_naming_an_internal_address_is_refused_by_the_guard(endpoint: str, rule: str) -> None:
    world, browser = World(), Browser()
    world.metadata["token_endpoint"] = endpoint
    exc = refused(connector(world, browser))
    assert exc.step == "discovery" and rule in exc.public_message
    assert browser.asked == [] and "POST /register" not in world.paths()


def test_a_token_endpoint_whose_name_resolves_inside_is_refused_before_connecting() -> None:
    async def inside(host: str, port: int) -> list[str]:
        return ["10.1.2.3"]

    world, browser = World(), Browser()
    world.metadata["token_endpoint"] = "https://token.evil.test/token"
    exc = refused(connector(world, browser, resolver=inside))
    assert exc.step == "token request" or exc.data["step"] == "token request"
    assert "10.1.2.3" in exc.public_message and exc.data["cause"] == "ssrf_blocked"


def test_an_issuer_that_is_not_the_one_asked_is_refused_and_its_endpoints_unused() -> None:
    world, browser = World(), Browser()
    world.metadata["issuer"] = "https://attacker.test"
    exc = refused(connector(world, browser))
    assert "issuer" in exc.public_message and "attacker.test" in exc.public_message
    assert browser.asked == [] and world.paths()[-1] == "GET /.well-known/oauth-authorization-server"


def test_a_token_endpoint_that_redirects_is_not_followed() -> None:
    """A real HTTP exchange on loopback (the in-process services skip the transport)."""
    world = World()
    with serving() as server:
        world.metadata["token_endpoint"] = f"http://127.0.0.1:{server.port}/redirect"
        conn = OAuthConnector(egress_for(world, allowed=("127.0.0.1/32",)), MCP, PROFILE, Browser())
        exc = refused(conn)
        assert [r["path"] for r in server.requests] == ["/redirect"]  # the one POST; nothing followed
    assert "redirects are not followed" in exc.public_message and "SECRET" not in exc.public_message
    assert exc.data["cause"] == "upstream_redirect"


@pytest.mark.parametrize(
    ("route", "reply", "said"),
    [
        (
            "GET /.well-known/oauth-authorization-server",
            (200, {"content-type": "application/json"}, b"{" * 70000),
            "more than",
        ),
        (
            "GET /.well-known/oauth-authorization-server",
            (200, {"content-type": "application/json"}, b"[1,2]"),
            "not a JSON object",
        ),
        (
            "GET /.well-known/oauth-authorization-server",
            (200, {"content-type": "text/html"}, b"{}"),
            "not a JSON object",
        ),
        (
            "GET /.well-known/oauth-protected-resource/mcp",
            js({"resource": "https://evil.test/mcp", "authorization_servers": [AS]}),
            "another resource",
        ),
        (
            "GET /.well-known/oauth-protected-resource/mcp",
            js({"resource": MCP, "authorization_servers": "x"}),
            "malformed",
        ),
        ("POST /register", js({"client_secret": "x"}, 201), "no valid client_id"),
        ("POST /token", js({"access_token": "t", "token_type": "mac"}), "not a bearer"),
        ("POST /token", js({"token_type": "Bearer"}), "without an access_token"),
        ("POST /token", (200, {"content-type": "application/json"}, b"not json"), "no JSON object"),
    ],
)
def test_an_oversized_or_malformed_answer_is_refused_with_a_reason(
    route: str, reply: Reply, said: str
) -> None:
    world = World()
    world.routes[route] = lambda _: reply
    exc = refused(connector(world))
    assert said in exc.public_message


def test_metadata_without_pkce_s256_is_refused() -> None:
    world = World()
    world.metadata["code_challenge_methods_supported"] = ["plain"]
    assert "S256" in refused(connector(world)).public_message


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"state": "forged"}, "state"),
        ({"iss": "https://evil.test"}, "another issuer"),
        ({"iss": f"{AS}/"}, "another issuer"),  # no normalisation
        ({"error": "access_denied", "code": None}, "access_denied"),
    ],
)
def test_a_callback_that_fails_its_checks_sends_no_code(changes: dict[str, str | None], said: str) -> None:
    world = World()
    exc = refused(connector(world, Browser(**changes)))
    assert said in exc.public_message and "POST /token" not in world.paths()


def test_a_missing_iss_is_refused_only_when_the_server_promised_one() -> None:
    world = World()
    world.metadata["authorization_response_iss_parameter_supported"] = True
    assert "iss" in refused(connector(world, Browser(iss=None))).public_message
    world2 = World()
    conn = connector(world2, Browser(iss=None))
    assert run(conn.challenged(401, CHALLENGE, {})) is True


def test_a_refusing_token_endpoint_is_quoted_by_its_error_code_only() -> None:
    world = World()
    world.routes["POST /token"] = lambda body: js(
        {"error": "invalid_grant", "error_description": f"echo {body.decode()}"}, 400
    )
    exc = refused(connector(world))
    assert exc.public_message.endswith("HTTP 400 (invalid_grant)")
    for secret in ("the-code", "s3cret-client"):
        assert secret not in exc.public_message and secret not in repr(exc.data)


def test_authorizations_are_bounded_whatever_the_server_says() -> None:
    world, browser = World(), Browser()
    world.routes["POST /token"] = lambda _: js({"access_token": "t", "token_type": "Bearer"})  # no refresh
    conn = connector(world, browser)
    for _ in range(3):
        assert run(conn.challenged(401, CHALLENGE, {"Authorization": "Bearer t"})) is True
    with pytest.raises(OAuthRefused, match="giving up"):
        run(conn.challenged(401, CHALLENGE, {"Authorization": "Bearer t"}))
    assert len(browser.asked) == 3


# -- the jwt-bearer grant (RFC 7523 §2.1, workload identity federation) --------------------------


def test_a_workload_jwt_is_presented_as_the_grant_and_a_refusal_is_final() -> None:
    world, browser = World(), Browser()
    world.metadata["token_endpoint_auth_methods_supported"] = ["none"]
    pre = PreRegistered(
        issuer=AS, client_id="workload", assertion=Secret("eyJ.the-jwt.sig"), grant=JWT_BEARER
    )
    conn = connector(world, browser, profile=ClientProfile(PROFILE.redirect_uri, None, (pre,)))
    assert run(conn.challenged(401, CHALLENGE, {})) is True
    form = dict(parse_qsl(world.seen[-1][2].decode()))
    assert form == {
        "grant_type": JWT_BEARER,
        "assertion": "eyJ.the-jwt.sig",
        "resource": MCP,
        "scope": "read",
        "client_id": "workload",
    }
    assert browser.asked == [] and run(conn.headers()) == {"Authorization": "Bearer at-1"}

    world = World()
    world.metadata["token_endpoint_auth_methods_supported"] = ["none"]
    world.routes["POST /token"] = lambda _: js({"error": "invalid_grant", "error_description": "eyJ.x"}, 400)
    conn = connector(world, browser, profile=ClientProfile(PROFILE.redirect_uri, None, (pre,)))
    caught = refused(conn)
    assert "invalid_grant" in str(caught) and "eyJ" not in str(caught)
    assert world.paths().count("POST /token") == 1 and browser.asked == []  # no retry, no other grant


def test_an_enterprise_id_token_is_exchanged_for_an_id_jag_then_presented_as_the_grant() -> None:
    world = World()
    world.metadata["token_endpoint_auth_methods_supported"] = ["client_secret_basic"]
    world.routes["POST /idp/token"] = lambda _: js(
        {"access_token": "the-id-jag", "issued_token_type": ID_JAG, "token_type": "N_A"}
    )
    idp = EnterpriseIdp(f"{AS}/idp/token", "idp-client", Secret("the-id-token"))
    pre = PreRegistered(issuer=AS, client_id="xaa", client_secret=Secret("pw"), grant=JWT_BEARER, idp=idp)
    conn = connector(world, profile=ClientProfile(PROFILE.redirect_uri, None, (pre,)))
    assert run(conn.challenged(401, CHALLENGE, {})) is True
    exchanged, granted = (
        dict(parse_qsl(body.decode())) for _, path, body in world.seen if path.endswith("/token")
    )
    assert exchanged == {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "requested_token_type": ID_JAG,
        "subject_token": "the-id-token",
        "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
        "audience": AS,
        "resource": MCP,
        "scope": "read",
        "client_id": "idp-client",
    }
    assert granted["grant_type"] == JWT_BEARER and granted["assertion"] == "the-id-jag"
    assert "client_secret" not in granted  # client_secret_basic: in the header

    world.routes["POST /idp/token"] = lambda _: js({"access_token": "x", "token_type": "Bearer"})
    conn = connector(world, profile=ClientProfile(PROFILE.redirect_uri, None, (pre,)))
    before = world.paths().count("POST /token")
    assert "identity assertion grant" in str(refused(conn))
    assert world.paths().count("POST /token") == before  # nothing presented to the AS
