"""API keys: issued to a user or to one of their agents, listed by prefix, revoked.

A user issues, lists and revokes their own keys and their agents'; an admin anyone's. The
secret exists outside the database only in ``issue``'s answer; it is stored as a hash.

A key may be issued narrower than what it acts for (issue 20): a ``scope`` (some of its
agent's toolkits, or some of their tools), a ``budget`` of credits of its own and an expiry.
The scope is checked against the agent's (or user's) scope inside the write, so nothing
wider is ever stored (``access/keys.narrowing_in``); listings show the budget and what the
key has spent of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appliance.access import keys, policy, principals
from appliance.catalogue.naming import SEPARATOR
from appliance.errors import Conflict, InvalidParams, NotFound
from appliance.gateway.admin.people import no_such_user, user_id
from appliance.gateway.admin.projects import check_project
from appliance.ledger import store as ledger
from appliance.ledger.amounts import credits, parse_credits
from appliance.models import Principal

MAX_SCOPE = 100  # toolkits a key's narrowing names

if TYPE_CHECKING:  # the CLI imports these modules at start-up, the runtime only when it runs
    from appliance.gateway.runtime import Runtime


def scope_from_text(entries: list[str]) -> list[dict[str, Any]] | None:
    """The CLI's ``--scope`` values and the console's lines, ``[project/]toolkit[:tool,tool]``,
    as the API's ``scope`` (None when there are none: the key is not narrowed)."""
    out: list[dict[str, Any]] = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        kit, _, tools = entry.partition(":")
        project, sep, slug = kit.strip().rpartition("/")
        item: dict[str, Any] = {"toolkit": slug.strip(), "project": project.strip() if sep else "default"}
        named = [t.strip() for t in tools.split(",") if t.strip()]
        if named:
            item["tools"] = named
        out.append(item)
    return out or None


def expiry_from_form(value: str) -> str | None:
    """A console date-time field's value (no zone: every console time is UTC) for ``issue``."""
    value = value.strip()
    if not value:
        return None
    _, _, clock = value.partition("T")
    if clock and not clock.endswith(("Z", "z")) and "+" not in clock and "-" not in clock:
        value += "Z"
    return value


async def list_keys(
    rt: Runtime, actor: Principal, *, user: int | None = None, agent_id: int | None = None
) -> list[dict[str, Any]]:
    """Newest first; a user who is not an admin sees their own keys only."""
    principals.require_person(actor)
    async with rt.db.read() as conn:
        if agent_id is not None:
            await principals.get_agent(conn, actor, agent_id)
        if not (actor.is_admin or actor.operator):
            if user not in (None, actor.user_id):
                raise no_such_user(user)
            user = actor.user_id
        return await shown(conn, await keys.list_keys(conn, user_id=user, agent_id=agent_id))


async def shown(conn: Any, listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Listings as the faces show them: a budget in credits, with what the key has spent."""
    out = []
    for k in listed:
        k = dict(k)
        milli = k.pop("budget_milli")
        if milli is not None:
            prefix = str(k["prefix"])
            spent = await conn.batch(lambda r, p=prefix: ledger.key_spent(r, p))
            k["budget"], k["spent"] = credits(milli), credits(spent)
        else:
            k["budget"] = None
        out.append(k)
    return out


def parse_scope(raw: Any) -> list[tuple[str, str, list[str]]] | None:
    """``[{"toolkit", "project"?, "tools"?}]`` → (slug, project, full tool names); None: not narrowed."""
    if raw is None:
        return None
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_SCOPE:
        raise InvalidParams(
            f"'scope' must be a list of 1 to {MAX_SCOPE} {{toolkit, project?, tools?}} objects", field="scope"
        )
    out = []
    for item in raw:
        if not isinstance(item, dict) or not set(item) <= {"toolkit", "project", "tools"}:
            raise InvalidParams("each 'scope' entry is {toolkit, project?, tools?}", field="scope")
        slug = item.get("toolkit")
        if not isinstance(slug, str) or not slug or len(slug) > 256:
            raise InvalidParams("each 'scope' entry names a 'toolkit'", field="scope")
        project = check_project(item.get("project", "default"))
        tools = principals.check_tool_names(item.get("tools") or [], "scope")
        full = [t if t.startswith(slug + SEPARATOR) else f"{slug}{SEPARATOR}{t}" for t in tools]
        out.append((slug, project, full))
    return out


async def issue(
    rt: Runtime,
    actor: Principal,
    *,
    user: int | str | None = None,
    agent_id: int | None = None,
    name: Any = "",
    expires_at: Any = None,
    preload: Any = None,
    read_only: Any = False,
    scope: Any = None,
    budget: Any = None,
) -> tuple[str, dict[str, Any]]:
    """A new key (its secret and its listing) for ``user`` (None: the agent's, else the actor's)
    or for agent ``agent_id``, which must then act for ``user`` if one is named; ``scope``
    narrows it (never wider than that agent or user), ``budget`` caps what it spends."""
    principals.require_person(actor)
    if not policy.check_flag(read_only):
        policy.require_unguarded(actor, "issue a key that is not read-only")
    if name != "":
        name = principals.check_name(name)
    expiry = keys.parse_expiry(expires_at)
    if preload is not None:
        preload = principals.check_tool_names(preload, "preload")
    wanted = parse_scope(scope)
    budget_milli = None if budget is None else parse_credits(budget, "budget")
    async with rt.db.write() as tx:
        owner = None
        if user is not None:
            owner = await user_id(tx, user)
            if not principals.manages(actor, owner):
                raise no_such_user(user)  # the same answer as absent
        if agent_id is not None:
            agent = await principals.get_agent(tx, actor, agent_id)
            if owner not in (None, agent["user_id"]):
                # Each exists and is the actor's to manage: the pair contradicts the stored agent.
                named = (await principals.get_user(tx, owner))["name"]
                raise Conflict(f"agent {agent_id} does not act for user {named!r}", field="user_id")
            owner = int(agent["user_id"])
        elif owner is None:
            if actor.operator:
                raise InvalidParams("name the user the key belongs to", field="user_id")
            owner = actor.user_id
        holder = await principals.get_user(tx, owner)
        rows = None
        if wanted is not None:
            parent = Principal(
                user_id=owner,
                name=holder["name"],
                is_admin=holder["is_admin"],
                key_prefix="",
                agent_id=agent_id,
                agent_name=None if agent_id is None else agent["name"],
            )
            rows = await tx.batch(lambda r: keys.narrowing_in(r, parent, wanted))
        secret, listed = await keys.create_key(
            tx,
            owner,
            name=name,
            agent_id=agent_id,
            expires_at=expiry,
            preload=preload,
            read_only=read_only,
            scope=rows,
            budget=budget_milli,
        )
        return secret, (await shown(tx, [listed]))[0]


async def revoke(rt: Runtime, actor: Principal, prefix: str) -> dict[str, Any]:
    """Fails from the key's next request on; revoking twice keeps the first time."""
    principals.require_person(actor)
    async with rt.db.write() as tx:
        found = await keys.key_info(tx, prefix)
        if found is None or not principals.manages(actor, int(found["user_id"])):
            raise NotFound(f"no key with prefix {prefix!r}", field="prefix")
        if prefix == actor.key_prefix:
            # Nobody locks themselves out by accident: revoke it with another key.
            raise Conflict("this is the key making the request; revoke it with another key", field="prefix")
        return (await shown(tx, [await keys.revoke(tx, prefix)]))[0]


async def set_read_only(rt: Runtime, actor: Principal, prefix: str, read_only: Any) -> dict[str, Any]:
    """Make a key read-only (only read tools run) or lift that; its agent's flag still counts
    (``effective_read_only``): an agent's state never widens a key."""
    principals.require_person(actor)
    policy.require_unguarded(actor)
    flag = policy.check_flag(read_only)
    async with rt.db.write() as tx:
        found = await keys.key_info(tx, prefix)
        if found is None or not principals.manages(actor, int(found["user_id"])):
            raise NotFound(f"no key with prefix {prefix!r}", field="prefix")
        return (await shown(tx, [await keys.set_read_only(tx, prefix, flag)]))[0]


async def update(rt: Runtime, actor: Principal, prefix: str, doc: dict[str, Any]) -> dict[str, Any]:
    """A key's read-only flag, budget (credits; null: none of its own) or expiry (RFC 3339;
    null: never), any of them, by whoever manages the key's user. A budget or expiry is
    checked whole before anything is written."""
    principals.require_person(actor)
    if not doc:
        raise InvalidParams("name at least one of read_only, budget, expires_at", field="body")
    changes: dict[str, Any] = {}
    if "budget" in doc:
        changes["budget_milli"] = None if doc["budget"] is None else parse_credits(doc["budget"], "budget")
    if "expires_at" in doc:
        changes["expires_at"] = None if doc["expires_at"] is None else keys.parse_expiry(doc["expires_at"])
    flag = None
    if "read_only" in doc:
        policy.require_unguarded(actor)
        flag = policy.check_flag(doc["read_only"])
    async with rt.db.write() as tx:
        found = await keys.key_info(tx, prefix)
        if found is None or not principals.manages(actor, int(found["user_id"])):
            raise NotFound(f"no key with prefix {prefix!r}", field="prefix")
        listed = await keys.set_limits(tx, prefix, changes)
        if flag is not None:
            listed = await keys.set_read_only(tx, prefix, flag)
        return (await shown(tx, [listed]))[0]


def check_admin_key(key: str) -> None:
    """A key an operator supplies (``TOOLSPOKE_ADMIN_KEY``) has the form of one we generate."""
    keys.check_format(key)


async def first_admin_key(rt: Runtime, key: str | None = None) -> str | None:
    """``init``: the first admin's key (``key``, else a new one), unless an admin key exists
    already (None: nothing installed, and no key is ever shown twice)."""
    async with rt.db.read() as conn:
        if await keys.has_admin_key(conn):
            return None
    key = key or keys.new_key()
    async with rt.db.write() as tx:
        user = await keys.ensure_admin(tx)
        await keys.add_key(tx, user, key, name="init")
    return key


async def authenticate(rt: Runtime, key: str) -> Principal:
    """Whom a key acts for, checked as every request's is (expiry, revocation)."""
    async with rt.db.read() as conn:
        return await keys.authenticate(conn, key)
