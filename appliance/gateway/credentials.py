"""Toolkit credentials: validated, sealed in the vault, shown as metadata only, put on calls.

Write-only everywhere: ``show`` returns the scheme, its non-secret settings (a header name,
a token URL), the key version and when it changed, never a value. ``prepare`` opens the
credential for one call and returns what the upstream layer needs (an ``Authorizer`` for
OpenAPI, headers or child environment for MCP) and the ``Redactor`` for the answer.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from appliance.catalogue import store, sync_store
from appliance.db import ReadConn, SyncReader
from appliance.egress.auth import MCP_HTTP_SCHEMES, MCP_STDIO_SCHEMES, SCHEMES, Authorizer, UpstreamAuth
from appliance.egress.oauth import OAuthGrant
from appliance.errors import InvalidParams, UpstreamError
from appliance.gateway import redaction
from appliance.gateway.runtime import Runtime
from appliance.models import CallResult, Tool
from appliance.protocol.relays import LogRelay, ProgressCallback
from appliance.secret import MIN_FORM, NO_NEEDLES, Needles, Redactor, Secret
from appliance.vault import store as vault_store
from appliance.vault.crypto import SealError

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")  # an HTTP header name (RFC 9110 token)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_QUERY_NAME = re.compile(r"[A-Za-z0-9_.\[\]-]{1,100}")
# Headers a credential must not name: they route or frame the request.
_RESERVED = {"host", "content-length", "transfer-encoding", "connection", "cookie", "content-type"}
SECRET_FIELDS = {
    "bearer": ("token",),
    "header": ("value",),
    "query": ("value",),
    "cookie": ("value",),
    "basic": ("username", "password"),
    "oauth2": ("client_id", "client_secret", "refresh_token"),
}


@dataclass(frozen=True)
class CredentialInput:
    """A credential as an owner gave it: scheme, plain settings and wrapped secret parts."""

    scheme: str
    settings: dict[str, Any] = field(default_factory=dict)
    secrets: dict[str, Secret] = field(default_factory=dict)

    def plain(self) -> dict[str, str]:
        return {k: v.reveal() for k, v in self.secrets.items()}


def _secret(
    doc: Mapping[str, Any], key: str, *, required: bool = True, short_ok: bool = False
) -> Secret | None:
    value = doc.get(key)
    if value is None and not required:
        return None
    if isinstance(value, Secret):
        value = value.reveal()
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"'{key}' must be a non-empty string", field=key)
    if any(c in value for c in "\r\n\0"):
        raise InvalidParams(f"'{key}' must not contain a line break or NUL", field=key)
    if not short_ok and len(value) < MIN_FORM:
        raise InvalidParams(
            f"'{key}' is too short for a credential (at least {MIN_FORM} characters)", field=key
        )
    return Secret(value)


def _name(doc: Mapping[str, Any], scheme: str, spec_schemes: Mapping[str, Any]) -> str:
    name = doc.get("name")
    if name is None:
        # The spec's own apiKey scheme for this location, when it declares exactly one.
        found = [
            s.get("name")
            for s in spec_schemes.values()
            if isinstance(s, dict) and s.get("type") == "apiKey" and s.get("in") == scheme
        ]
        if len(found) == 1 and isinstance(found[0], str):
            return found[0]
        raise InvalidParams(f"scheme {scheme!r} needs 'name' (the {scheme} name to send)", field="name")
    pattern = _QUERY_NAME if scheme == "query" else _TOKEN
    if not isinstance(name, str) or not pattern.fullmatch(name):
        raise InvalidParams(f"'name' is not a valid {scheme} name", field="name")
    if scheme == "header" and name.lower() in _RESERVED:
        raise InvalidParams(f"a credential cannot be sent as the {name} header", field="name")
    return name


def schemes_for(kind: str) -> tuple[str, ...]:
    """The schemes a toolkit of ``kind`` (openapi, http, sse, stdio) takes; () for none."""
    return {
        "openapi": tuple(s for s in SCHEMES if s != "env"),
        "http": MCP_HTTP_SCHEMES,
        "sse": MCP_HTTP_SCHEMES,
        "stdio": MCP_STDIO_SCHEMES,
    }.get(kind, ())


def parse_credential(
    rt: Runtime, doc: Mapping[str, Any], *, kind: str, spec_schemes: Mapping[str, Any] | None = None
) -> CredentialInput:
    """Validate an owner's credential for a toolkit of ``kind`` (openapi, http, sse, stdio).

    ``doc`` is an admin API body or the CLI's equivalent; errors name the field.
    """
    scheme = doc.get("scheme")
    allowed = schemes_for(kind)
    if not allowed:
        raise InvalidParams("this toolkit has no upstream to send a credential to", field="scheme")
    if scheme not in allowed:
        raise InvalidParams(f"'scheme' must be one of {', '.join(allowed)} for this toolkit", field="scheme")
    assert isinstance(scheme, str)
    schemes = spec_schemes or {}
    settings: dict[str, Any] = {}
    secrets: dict[str, Secret] = {}
    if scheme == "bearer":
        secrets["token"] = _need(_secret(doc, "token"))
    elif scheme in ("header", "query", "cookie"):
        settings["name"] = _name(doc, scheme, schemes)
        secrets["value"] = _need(_secret(doc, "value"))
    elif scheme == "basic":
        secrets["username"] = _need(_secret(doc, "username", short_ok=True))
        secrets["password"] = _need(_secret(doc, "password"))
        if ":" in secrets["username"].reveal():
            raise InvalidParams("a Basic user name cannot contain ':'", field="username")
    elif scheme == "oauth2":
        url = doc.get("token_url")
        if not isinstance(url, str) or not url:
            raise InvalidParams("'token_url' must be the OAuth token endpoint URL", field="token_url")
        settings["token_url"] = str(rt.egress.check_url(url, field="token_url"))
        scope = doc.get("scope", "")
        if not isinstance(scope, str):
            raise InvalidParams("'scope' must be a string", field="scope")
        client_auth = doc.get("client_auth", "basic")
        if client_auth not in ("basic", "post"):
            raise InvalidParams("'client_auth' must be basic or post", field="client_auth")
        settings.update(scope=scope, client_auth=client_auth)
        secrets["client_id"] = _need(_secret(doc, "client_id", short_ok=True))
        secrets["refresh_token"] = _need(_secret(doc, "refresh_token"))
        client_secret = _secret(doc, "client_secret", required=False)
        if client_secret is not None:
            secrets["client_secret"] = client_secret
    else:  # env
        env = doc.get("env")
        if not isinstance(env, Mapping) or not env:
            raise InvalidParams("'env' must be an object of variable names and values", field="env")
        for key in env:
            if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
                raise InvalidParams(f"invalid environment variable name {str(key)[:40]!r}", field="env")
            secrets[key] = _need(_secret(env, key))
        settings["names"] = sorted(secrets)
    return CredentialInput(scheme, settings, secrets)


def _need(value: Secret | None) -> Secret:
    assert value is not None
    return value


def to_auth(scheme: str, settings: Mapping[str, Any], fields: Mapping[str, str]) -> UpstreamAuth:
    """An opened credential as the upstream layer takes it."""

    def wrapped(key: str) -> Secret | None:
        value = fields.get(key)
        return Secret(value) if value else None

    if scheme == "oauth2":
        client_id, refresh = wrapped("client_id"), wrapped("refresh_token")
        assert client_id is not None and refresh is not None
        grant = OAuthGrant(
            token_url=str(settings.get("token_url", "")),
            client_id=client_id,
            refresh_token=refresh,
            client_secret=wrapped("client_secret"),
            scope=str(settings.get("scope", "")),
            client_auth=str(settings.get("client_auth", "basic")),
        )
        return UpstreamAuth(scheme, oauth=grant)
    if scheme == "env":
        return UpstreamAuth(scheme, env=tuple(sorted((k, Secret(v)) for k, v in fields.items())))
    return UpstreamAuth(
        scheme,
        name=str(settings.get("name", "")),
        value=wrapped("token") or wrapped("value"),
        username=wrapped("username"),
        password=wrapped("password"),
    )


def _kind(kit: Mapping[str, Any]) -> str:
    connection = kit.get("connection") or {}
    if kit["source_kind"] == "mcp":
        return str(connection.get("transport", ""))
    return str(kit["source_kind"])


async def set_credential(
    rt: Runtime, slug: str, doc: Mapping[str, Any], *, project: str = "default"
) -> dict[str, Any]:
    """Validate and seal a toolkit's credential (replacing any earlier one); its metadata."""
    async with rt.db.read() as conn:
        kit = await sync_store.find_toolkit(conn, slug, project=project)
        schemes = (await store.toolkit_egress(conn, kit["id"]))["security_schemes"]
    cred = parse_credential(rt, doc, kind=_kind(kit), spec_schemes=schemes)
    async with rt.db.write() as tx:
        await vault_store.put(tx, rt.vault, kit["id"], cred.scheme, cred.settings, cred.plain())
    await _changed(rt, project, slug)
    return await show_credential(rt, slug, project=project)


async def accepted_schemes(rt: Runtime, slug: str, *, project: str = "default") -> tuple[str, ...]:
    """The schemes a credential of this toolkit may use (its upstream's kind decides)."""
    async with rt.db.read() as conn:
        kit = await sync_store.find_toolkit(conn, slug, project=project)
    return schemes_for(_kind(kit))


async def store_credential(tx: Any, rt: Runtime, toolkit_id: int, cred: CredentialInput) -> None:
    """Seal ``cred`` inside the caller's transaction (an import stores toolkit and credential at once)."""
    await vault_store.put(tx, rt.vault, toolkit_id, cred.scheme, cred.settings, cred.plain())


async def show_credential(rt: Runtime, slug: str, *, project: str = "default") -> dict[str, Any]:
    async with rt.db.read() as conn:
        kit = await sync_store.find_toolkit(conn, slug, project=project)
        stored = await vault_store.get(conn, kit["id"])
    head = {"toolkit": slug, "project": project}
    return {**head, **stored.public()} if stored is not None else {**head, "set": False}


async def clear_credential(rt: Runtime, slug: str, *, project: str = "default") -> bool:
    async with rt.db.write() as tx:
        kit = await sync_store.find_toolkit(tx, slug, project=project)
        removed = await vault_store.delete(tx, kit["id"])
    await _changed(rt, project, slug)
    return removed


async def _changed(rt: Runtime, project: str, slug: str) -> None:
    # The pooled MCP session (or stdio child) still holds the old credential, and a cached
    # OAuth access token belongs to the old grant: both go.
    key = f"{project}.{slug}"
    rt.tokens.drop(key)
    await rt.mcp.discard(key)


async def load_auth(rt: Runtime, toolkit_id: int) -> UpstreamAuth | None:
    """The toolkit's opened credential (None: it has none); ``credential_unavailable`` if it cannot open."""
    async with rt.db.read() as conn:
        return await _open(rt, conn, await vault_store.get(conn, toolkit_id))


async def _open(rt: Runtime, conn: ReadConn, stored: vault_store.StoredSecret | None) -> UpstreamAuth | None:
    if stored is None:
        return None
    try:
        fields = await vault_store.open_secret(conn, rt.vault, stored)
    except SealError:
        raise UpstreamError(
            "the toolkit's stored credential cannot be decrypted; set it again "
            "(toolspoke credentials set); nothing was sent",
            reason="credential_unavailable",
        ) from None
    return to_auth(stored.scheme, stored.settings, fields)


async def connection_with_auth(rt: Runtime, toolkit_id: int, connection: dict[str, Any]) -> dict[str, Any]:
    """An MCP toolkit's connection as its calls use it (credential and cap; never stored).

    Probes and re-syncs use this too, so the pooled session they share with calls is not
    reopened for a connection that merely looks different.
    """
    return (await prepare_kit(rt, toolkit_id)).connection(connection)


@functools.lru_cache(maxsize=256)
def _extra_needles(values: tuple[str, ...]) -> Needles:
    """Secrets a call sent that the vault's needles lack (OAuth access tokens), compiled once
    per set: a token lives for minutes and serves many calls."""
    return Needles(values)


@dataclass
class PreparedCall:
    """What one call needs from the vault and the toolkit's egress settings."""

    auth: UpstreamAuth | None
    authorizer: Authorizer | None
    max_bytes: int
    needles: Needles = NO_NEEDLES  # every vault secret's forms (gateway/redaction.py)
    mode: str = "shared"  # the toolkit's connection mode: shared, or per_user (gateway/connections.py)
    pool_key: str | None = None  # per_user: the user's own MCP session, never another's
    http_auth: Any = None  # per_user OAuth on MCP: the user's tokens, answering 401s
    personal: tuple[str, ...] = ()  # per_user OAuth: the tokens this call may send

    def connection(self, connection: dict[str, Any]) -> dict[str, Any]:
        """An MCP connection with this call's opened credential (``auth``) and cap (``max_bytes``)."""
        extra: dict[str, Any] = {"max_bytes": self.max_bytes}
        if self.auth is not None:
            extra["auth"] = self.auth
        if self.http_auth is not None:
            extra["http_auth"] = self.http_auth
        return {**connection, **extra}

    def redactor(self) -> Redactor:
        """Every vault secret, and what this call sent that they may not cover: the OAuth
        access tokens it used (never in the vault) and, should the vault's needles come from
        an older look at the database than the credential, the credential itself."""
        sent = [*self.auth.secrets()] if self.auth is not None else []
        sent += self.personal
        if self.authorizer is not None:
            sent += self.authorizer.access_tokens()
        extra = self.needles.missing(sent)
        return Redactor(needles=(self.needles, _extra_needles(extra)) if extra else (self.needles,))

    def relays(
        self, on_progress: ProgressCallback | None, on_log: LogRelay | None
    ) -> tuple[ProgressCallback | None, LogRelay | None]:
        """The call's progress and log relays, redacting what an upstream says on the way."""
        redactor = self.redactor()
        if not redactor:
            return on_progress, on_log
        progress: ProgressCallback | None = None
        if on_progress is not None:
            relay_progress = on_progress

            def progress(params: dict[str, Any]) -> Awaitable[None] | None:
                return relay_progress(redactor.value(params))

        log: LogRelay | None = None
        if on_log is not None:
            deliver = on_log.deliver
            log = LogRelay(level=on_log.level, deliver=lambda params: deliver(redactor.value(params)))
        return progress, log

    def redact(self, result: CallResult) -> tuple[CallResult, int]:
        """``result`` with every form of every vault secret replaced (RELIABILITY D-6), and
        how many values were replaced (for the audit row and ``_meta.redacted``)."""
        redactor = self.redactor()
        if not redactor:
            return result, 0
        content = [redactor.value(part) for part in result.content]
        structured = redactor.value(result.structured)
        meta = redactor.value(result.meta)
        if not redactor.hits:
            return result, 0
        hits = redactor.hits
        return replace(result, content=content, structured=structured, meta={**meta, "redacted": hits}), hits


async def prepare(rt: Runtime, tool: Tool) -> PreparedCall:
    """Open ``tool``'s toolkit credential and byte cap for one call."""
    prepared = await prepare_kit(rt, tool.toolkit_id)
    if prepared.auth is not None and tool.source_kind == "openapi":
        key = f"{tool.project}.{tool.toolkit}"
        prepared.authorizer = Authorizer(
            prepared.auth, rt.tokens, key, on_rotated=lambda new: _keep_rotated(rt, tool.toolkit_id, new)
        )
    return prepared


async def prepare_kit(rt: Runtime, kit: int) -> PreparedCall:
    """Toolkit ``kit``'s opened credential and effective byte cap."""

    def read(reader: SyncReader) -> tuple[dict[str, Any], vault_store.StoredSecret | None]:
        return store.toolkit_egress_in(reader, kit), vault_store.get_in(reader, kit)

    async def load(conn: ReadConn) -> tuple[int | None, UpstreamAuth | None, str]:
        egress, stored = await conn.batch(read)  # both reads in one thread hop
        return egress["max_response_bytes"], await _open(rt, conn, stored), egress["connection_mode"]

    # Remembered until the database changes (a credential set, cleared, rotated or retired
    # anywhere is a commit): a steady stream of calls opens each credential once. A row
    # that does not open raises, and a failure is never remembered.
    max_bytes, auth, mode = await rt.db.cached(("credential", kit), load)
    return PreparedCall(
        auth=auth,
        authorizer=None,
        max_bytes=int(max_bytes or rt.settings.upstream_max_bytes),
        needles=await redaction.needles(rt),
        mode=mode,
    )


async def _keep_rotated(rt: Runtime, toolkit_id: int, refresh_token: Secret) -> None:
    """The token endpoint issued a new refresh token: seal it in place of the old one."""
    async with rt.db.write() as tx:
        stored = await vault_store.get(tx, toolkit_id)
        if stored is None or stored.scheme != "oauth2":
            return
        fields = await vault_store.open_secret(tx, rt.vault, stored)
        fields["refresh_token"] = refresh_token.reveal()
        await vault_store.put(tx, rt.vault, toolkit_id, stored.scheme, stored.settings, fields)


async def set_response_cap(
    rt: Runtime, slug: str, value: int | None, *, project: str = "default"
) -> dict[str, Any]:
    """Raise or lower one toolkit's response byte cap (None: back to the setting)."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 2**31
    ):
        raise InvalidParams(
            "'max_response_bytes' must be a positive integer or null", field="max_response_bytes"
        )
    async with rt.db.write() as tx:
        kit = await sync_store.find_toolkit(tx, slug, project=project)
        await store.set_max_response_bytes(tx, kit["id"], value)
    return {
        "toolkit": slug,
        "project": project,
        "max_response_bytes": value,
        "effective": value or rt.settings.upstream_max_bytes,
    }
