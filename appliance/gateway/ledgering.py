"""Operations on credits, prices and call history, shared by the admin API and the CLI.

Writes go through the book (``rt.book.admin``), so the serving process's figures reload in
the same transaction; reads go straight to the database.
"""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Any

from appliance.access import policy, principals
from appliance.catalogue import store as catalogue
from appliance.catalogue.naming import SEPARATOR
from appliance.errors import Forbidden, InvalidParams, NotFound
from appliance.gateway.accounting import is_owner
from appliance.gateway.admin import people
from appliance.gateway.runtime import Runtime
from appliance.ledger import history
from appliance.ledger import store as ledger
from appliance.ledger.amounts import credits, parse_count, parse_credits
from appliance.ledger.book import Tally
from appliance.models import Principal, Toolkit

QUOTA_FIELDS = ("fee", "daily_limit", "monthly_limit", "unit", "kind_fees", "tool_fees")
PRICE_FIELDS = QUOTA_FIELDS[:4]  # what ``toolkit_prices`` holds; the fees per kind and tool apart
KINDS = policy.KINDS
MAX_TOOL_FEES = 500  # per request
OUTCOMES = history.OUTCOMES  # what a call's history may be filtered by, for the faces' forms
MAX_ID = 2**63 - 1


def _id(value: Any, field: str) -> int:
    """A row id as SQLite can hold it; anything else is absent, never an overflow."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ID:
        raise NotFound(f"no {field} {value!r}", field=field)
    return value


def _text(value: Any, field: str, *, limit: int = 500) -> str:
    """Text SQLite can store: a string, not too long, no lone surrogates."""
    if not isinstance(value, str) or len(value) > limit:
        raise InvalidParams(f"'{field}' must be text of at most {limit} characters", field=field)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidParams(f"'{field}' is not valid Unicode text", field=field) from None
    return value


async def toolkit(rt: Runtime, slug: str, project: str | None = None) -> Toolkit:
    async with rt.db.read() as conn:
        kits = await catalogue.find_toolkits(conn, slug, project=project)
    if not kits:
        raise NotFound(f"no toolkit {slug!r}", field="toolkit")
    if len(kits) > 1:
        projects = [k.project for k in kits]
        raise InvalidParams(
            f"toolkit {slug!r} is installed in several projects ({', '.join(projects)}); name one",
            field="project",
            data={"projects": projects},
        )
    return kits[0]


async def user_id(rt: Runtime, user: str | int) -> int:
    """A user by id (the API) or by name (the CLI)."""
    if isinstance(user, str):
        _text(user, "user")
    async with rt.db.read() as conn:
        return await people.user_id(conn, user)


async def viewable_toolkit(rt: Runtime, viewer: Principal, slug: str, project: str | None) -> Toolkit:
    """A toolkit whose figures ``viewer`` may see: its owner's or any, for an admin."""
    kit = await toolkit(rt, slug, project)
    price = await rt.book.price(kit.id, toolkit=kit.slug)
    if not (viewer.is_admin or is_owner(viewer, price)):
        raise NotFound(f"no toolkit {slug!r}", field="toolkit")  # the same answer as absent
    return kit


def _use(t: Tally, unit: str, limit: int, resets_at: str) -> dict[str, Any]:
    used = t.calls + t.held_calls if unit == "calls" else t.milli + t.held_milli
    shown = (lambda v: v) if unit == "calls" else credits
    return {
        "used": shown(used),
        "limit": shown(limit),
        "remaining": None if not limit else shown(max(limit - used, 0)),
        "resets_at": resets_at,
    }


async def quota(rt: Runtime, slug: str, project: str | None = None) -> dict[str, Any]:
    kit = await toolkit(rt, slug, project)
    price, day_t, month_t, day, month = await rt.book.figures(kit.id, toolkit=kit.slug)
    return {
        "toolkit": kit.slug,
        "project": kit.project,
        "fee": credits(price.fee),
        # the most specific fee wins: a tool's, its kind's, the toolkit's ``fee``
        "kind_fees": {kind: credits(fee) for kind, fee in sorted(price.kinds.items())},
        "tool_fees": {name: credits(fee) for name, fee in sorted(price.tools.items())},
        "daily_limit": price.daily if price.unit == "calls" else credits(price.daily),
        "monthly_limit": price.monthly if price.unit == "calls" else credits(price.monthly),
        "unit": price.unit,
        "daily": _use(day_t, price.unit, price.daily, day.resets_at),
        "monthly": _use(month_t, price.unit, price.monthly, month.resets_at),
    }


async def set_quota(
    rt: Runtime, slug: str, doc: dict[str, Any], project: str | None = None
) -> dict[str, Any]:
    """Change some of fee, daily_limit, monthly_limit, unit, and fees per kind (``kind_fees``:
    kind → credits, null removes) and per tool (``tool_fees``: name → credits, null removes);
    the rest stays. Nothing stored on error."""
    unknown = sorted(set(doc) - set(QUOTA_FIELDS))
    if unknown:
        raise InvalidParams(
            f"unknown field {unknown[0]!r}; expected {', '.join(QUOTA_FIELDS)}", field=unknown[0]
        )
    kit = await toolkit(rt, slug, project)
    price = await rt.book.price(kit.id, toolkit=kit.slug)
    unit = doc.get("unit", price.unit)
    if unit not in ("calls", "credits"):
        raise InvalidParams("'unit' must be 'calls' or 'credits'", field="unit")
    fee = parse_credits(doc["fee"], "fee") if "fee" in doc else price.fee

    def ceiling(key: str, current: int) -> int:
        if key not in doc:
            if unit != price.unit and current:
                raise InvalidParams(f"changing 'unit' needs a new '{key}' too", field=key)
            return current
        return parse_count(doc[key], key) if unit == "calls" else parse_credits(doc[key], key)

    daily = ceiling("daily_limit", price.daily)
    monthly = ceiling("monthly_limit", price.monthly)
    kinds = _kind_fees(doc["kind_fees"]) if "kind_fees" in doc else {}
    tools = await _tool_fees(rt, kit, doc["tool_fees"]) if "tool_fees" in doc else {}
    pricing = any(f in doc for f in PRICE_FIELDS)  # else the toolkit keeps the default fee

    def work(r: Any) -> None:
        if pricing:
            ledger.upsert_price(r, time.time(), kit.id, fee, daily, monthly, unit)
        ledger.set_fees(r, kit.id, kinds, tools)

    await rt.book.admin(work)
    return await quota(rt, slug, kit.project)


def _fee_map(raw: Any, field: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise InvalidParams(f"'{field}' must be an object of credits (null removes one)", field=field)
    return raw


def _kind_fees(raw: Any) -> dict[str, int | None]:
    """``{"write": 2, "read": null}`` → millicredits per kind (None: remove)."""
    out: dict[str, int | None] = {}
    for kind, value in _fee_map(raw, "kind_fees").items():
        if kind not in KINDS:
            raise InvalidParams(f"kind_fees: {kind!r} is not one of {', '.join(KINDS)}", field="kind_fees")
        out[kind] = None if value is None else parse_credits(value, f"kind_fees.{kind}")
    return out


async def _tool_fees(rt: Runtime, kit: Toolkit, raw: Any) -> dict[str, int | None]:
    """``{"getPet": 0.5}`` (short or full names) → millicredits per full name (None: remove).
    A fee is set only for a tool the toolkit has; removing one it no longer has is fine."""
    fees = _fee_map(raw, "tool_fees")
    if len(fees) > MAX_TOOL_FEES:
        raise InvalidParams(f"'tool_fees' sets at most {MAX_TOOL_FEES} tools at once", field="tool_fees")
    out: dict[str, int | None] = {}
    async with rt.db.read() as conn:
        for name, value in fees.items():
            _text(name, "tool_fees", limit=256)
            full = name if name.startswith(kit.slug + SEPARATOR) else f"{kit.slug}{SEPARATOR}{name}"
            if value is None:
                out[full] = None
                continue
            if not await policy.tool_in_toolkit(conn, kit.id, full):
                raise NotFound(f"toolkit {kit.slug!r} has no tool {name!r}", field="tool_fees")
            out[full] = parse_credits(value, f"tool_fees.{name}")
    return out


async def grant(rt: Runtime, user: str | int, amount: Any, *, actor: str, note: Any = "") -> dict[str, Any]:
    """An admin's grant of credit (negative: taken back, never below what is available)."""
    milli = parse_credits(amount, "amount", allow_negative=True)
    if milli == 0:
        raise InvalidParams("'amount' must not be 0", field="amount")
    note = _text(note, "note")
    uid = await user_id(rt, user)
    held = rt.book.balances[uid].held_milli if uid in rt.book.balances else 0

    def work(r: Any) -> dict[str, Any]:
        current = ledger.balance(r, uid)
        if current + milli - held < 0:
            raise InvalidParams(
                f"taking back {credits(-milli)} would leave user {user!r} below 0 "
                f"(available: {credits(max(current - held, 0))})",
                field="amount",
            )
        entry = ledger.insert_grant(r, time.time(), uid, milli, actor, note)
        return {"entry": entry, "balance": current + milli}

    done = await rt.book.admin(work)
    return {
        "user_id": uid,
        "entry": done["entry"],
        "amount": credits(milli),
        "balance": credits(done["balance"]),
    }


async def void(rt: Runtime, entry_id: int, *, actor: str, note: Any = "") -> dict[str, Any]:
    """Reverse one charge with a compensating entry: credit back, quota use back."""
    entry_id = _id(entry_id, "entry")
    note = _text(note, "note")
    done = await rt.book.admin(lambda r: ledger.insert_void(r, time.time(), entry_id, actor, note))
    return {"void": done["id"], "charge": entry_id, "amount": credits(done["amount_milli"])}


async def account(rt: Runtime, user: str | int) -> dict[str, Any]:
    uid = await user_id(rt, user)
    async with rt.db.read() as conn:
        total = await history.balance(conn, uid)
        recent = await history.entries(conn, uid)
    return {"user_id": uid, "balance": credits(total), "entries": recent}


def parse_time(raw: str | None, field: str) -> float | None:
    """RFC 3339 (``2026-11-29T10:00:00Z``) or unix seconds."""
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise InvalidParams(f"'{field}' must be a finite time", field=field)
        return value
    try:
        moment = datetime.fromisoformat(_text(raw, field, limit=64).replace("Z", "+00:00"))
    except ValueError:
        raise InvalidParams(f"'{field}' must be an RFC 3339 time or unix seconds", field=field) from None
    if moment.tzinfo is None:
        raise InvalidParams(f"'{field}' needs a time zone (e.g. a trailing Z)", field=field)
    return moment.timestamp()


async def calls(
    rt: Runtime,
    viewer: Principal,
    *,
    toolkit_slug: str | None = None,
    project: str | None = None,
    user: str | int | None = None,
    agent: int | None = None,
    since: str | None = None,
    until: str | None = None,
    outcome: str | None = None,
    tool: str | None = None,
    limit: int = 100,
    cursor: str | None = None,
) -> dict[str, Any]:
    """A page of call history: owners see their toolkits and themselves, admins everything."""
    f = history.CallFilter(
        since=parse_time(since, "since"),
        until=parse_time(until, "until"),
        outcome=None if outcome is None else _text(outcome, "outcome"),
        tool=None if tool is None else _text(tool, "tool"),
    )
    if toolkit_slug is not None:
        kit = await viewable_toolkit(rt, viewer, toolkit_slug, project)
        f = history.CallFilter(**{**f.__dict__, "toolkit_id": kit.id})
    if user is not None:
        uid = await user_id(rt, user)
        if not (viewer.is_admin or viewer.user_id == uid):
            raise Forbidden("only an admin or the user may see a user's calls")
        f = history.CallFilter(**{**f.__dict__, "user_id": uid})
    if agent is not None:
        agent = _id(agent, "agent")
        if not (viewer.is_admin or await _agent_of(rt, agent) == viewer.user_id):
            raise Forbidden("only an admin or the agent's user may see its calls")
        f = history.CallFilter(**{**f.__dict__, "agent_id": agent})
    if toolkit_slug is None and user is None and agent is None and not viewer.is_admin:
        # Nothing narrowed it: a non-admin sees their own calls, never everyone's.
        f = history.CallFilter(**{**f.__dict__, "user_id": viewer.user_id})
    async with rt.db.read() as conn:
        return await history.calls(conn, f, limit=limit, cursor=cursor)


async def _agent_of(rt: Runtime, agent: int) -> int | None:
    """The user an agent acts for (None: no such agent)."""
    async with rt.db.read() as conn:
        return await principals.agent_user(conn, agent)
