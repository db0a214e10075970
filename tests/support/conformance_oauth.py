"""The conformance suite's ``auth/*`` client scenarios, through toolspoke's own upstream client.

Run by ``conformance_client.py`` when ``MCP_CONFORMANCE_SCENARIO`` starts with ``auth/``. The
MCP client (``appliance/mcpclient``) connects over the egress guard (``appliance/egress``)
with an ``OAuthConnector`` (``appliance/oauthclient``) answering the server's challenges,
lists the tools and calls each one, as the suite's reference clients do.

The one thing here that production does not do is the authorization step. There a person's
browser opens the authorization URL and comes back to the appliance's ``/oauth/callback``.
The suite's authorization server approves at once and redirects, so ``headless`` fetches
the URL itself, does not follow the redirect, and hands the redirect's query parameters to
the connector, which checks them (state, iss) exactly as it would a browser's callback.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx

from appliance.config.loading import load
from appliance.egress.transport import Egress
from appliance.mcpclient.http_transport import connect_http
from appliance.oauthclient.connector import OAuthConnector
from appliance.oauthclient.flow import Pending
from appliance.oauthclient.identity import JWT_BEARER, ClientProfile, EnterpriseIdp, PreRegistered
from appliance.secret import Secret

# The suite expects this client_id from a client that offers a Client ID Metadata Document
# (auth/basic-cimd); the redirect URI on the same made-up host is never fetched.
PUBLIC_URL = "https://conformance-test.local"
CLIENT_METADATA_URL = f"{PUBLIC_URL}/client-metadata.json"
ARGUMENTS: dict[str, dict[str, object]] = {"add_numbers": {"a": 3, "b": 4}}


async def headless(pending: Pending) -> Mapping[str, str]:
    """Open the authorization URL as a browser would, and stop at the redirect to us."""
    async with httpx.AsyncClient(follow_redirects=False, timeout=10) as client:
        answer = await client.get(pending.url)
    location = answer.headers.get("location", "")
    if not answer.is_redirect or not location.startswith(pending.redirect_uri + "?"):
        raise RuntimeError(f"the authorization endpoint answered {answer.status_code} without our redirect")
    return dict(parse_qsl(urlsplit(location).query))


def profile(scenario: str, context: dict[str, Any]) -> ClientProfile:
    settings = load(
        env={
            "TOOLSPOKE_PUBLIC_URL": PUBLIC_URL,
            "TOOLSPOKE_OAUTH_CLIENT_METADATA_URL": CLIENT_METADATA_URL,
        }
    )
    pre: tuple[PreRegistered, ...] = ()
    grant = "authorization_code"
    if scenario.startswith("auth/client-credentials"):
        grant = "client_credentials"
    elif context.get("valid_jwt") or context.get("idp_id_token"):
        grant = JWT_BEARER
    idp = None
    if isinstance(context.get("idp_id_token"), str):  # SEP-990: the person's single sign-on
        idp = EnterpriseIdp(
            context["idp_token_endpoint"], context["idp_client_id"], Secret(context["idp_id_token"])
        )
    if isinstance(context.get("client_id"), str):
        issuer = context.get("issuer")
        pre = (
            PreRegistered(
                issuer=issuer if isinstance(issuer, str) else None,
                client_id=context["client_id"],
                client_secret=Secret(context["client_secret"]) if context.get("client_secret") else None,
                private_key=Secret(context["private_key_pem"]) if context.get("private_key_pem") else None,
                # the workload's platform-issued JWT (auth/wif-jwt-bearer gives a valid one)
                assertion=Secret(context["valid_jwt"]) if context.get("valid_jwt") else None,
                grant=grant,
                idp=idp,
            ),
        )
    return ClientProfile.from_settings(settings, pre)


async def run(url: str, scenario: str, context: dict[str, Any]) -> int:
    settings = load(env={"ALLOWED_TOOL_CIDRS": "127.0.0.1/32"})
    async with Egress(settings) as egress:
        connector = OAuthConnector(egress, url, profile(scenario, context), headless)
        session = await connect_http(egress, url, auth=connector, timeout_s=20)
        try:
            tools = await session.list_tools(timeout_s=20)
            for tool in tools:
                result = await session.call_tool(tool["name"], ARGUMENTS.get(tool["name"], {}), timeout_s=20)
                print(f"called {tool['name']}: isError={result.get('isError', False)}")
        finally:
            await session.aclose()
    print(f"authorizations {connector.authorizations}, step-ups {connector.step_ups}")
    return 0


def main(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    try:
        return asyncio.run(run(url, scenario, context))
    except Exception as exc:  # the harness reads the exit code; the reason goes to stderr
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
