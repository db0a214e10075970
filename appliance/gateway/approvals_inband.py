"""Asking for an approval in band (issue 20 item 3): the person at the client says yes or no.

A call under an ``approve`` rule gets ``ApprovalRequired`` from the pipeline's approval stage
(``gateway/approvals.py``), with its pending approval. Where the client can ask its user,
the MCP layer (``rpc/inband.py``) asks instead of answering with the queue's URL: a 2025-era
session that declared ``elicitation`` gets an ``elicitation/create`` request during the
call; a 2026-07-28 request that declared it gets an ``input_required`` result and retries
with the answer. This module holds what both share: whose yes may come in band, what the
person reads, what their answer means, the decision itself, and the 2026-07-28 request
state.

**Who may answer in band.** The person at the client is the user the calling key acts for
(an agent's user, or the user of their own key). So only an approval whose rule names
``user`` as approver (the user the agent acts for may approve) is asked in band; one that
needs the toolkit's owner or an admin stays out of band, whatever the client can do.

**What the person reads** (form mode, a short text: no URL, nothing to type but a yes):
the tool, its kind and toolkit, who asks, the canonical arguments (redacted of every stored
secret, cut at ``ARGUMENTS_SHOWN`` characters), the cost, the approval's id and expiry.

**The decision** is the console's: ``pending → approved`` (``approval_granted``) or
``→ denied`` (``approval_denied``), its audit row in the same transaction, decided by
"<user> in band"; it applies only to a pending approval of this principal under a ``user``
rule. The call then runs through the pipeline with the approval named, like any retry, so
the binding (principal, tool, arguments' hash, policy version, expiry) is checked and the
approval used up in one write. An answer that is neither a yes nor a no (``cancel``, a
timeout, an error) decides nothing: the approval stays pending for the console.

**The 2026-07-28 request state** is the approval's id bound to the principal, the request
(the endpoint, the tool name and the arguments as sent: a retry with other arguments is
another request) and the approval's expiry, sealed with HMAC-SHA256 under a key this
process draws at start. It is the client's to echo, never to read; a state that fails the
check is refused. A restart voids outstanding states (the approval itself stays, and the
call asked again asks again).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any

import orjson

from appliance.access import approvals as store
from appliance.errors import ApprovalRequired, InvalidParams
from appliance.gateway import approvals, redaction
from appliance.gateway.idempotency import request_hash, scope_of
from appliance.gateway.runtime import Runtime
from appliance.ledger.amounts import credits
from appliance.ledger.store import insert_call
from appliance.models import Principal, Toolkit

FIELD = "approve"  # the form's one property
INPUT_KEY = "approval"  # the key of the input request in a 2026-07-28 input_required result
CONNECT_KEY = "connect"  # ... and of the URL-mode elicitation to a toolkit's connect page
CONNECT_S = 3600.0  # how long a connect state stays good: time for the person to connect
ARGUMENTS_SHOWN = 1000  # characters of canonical arguments the person reads
WAIT_S = 300.0  # the longest a 2025-era call waits for the person's answer
_STATE_KEY = secrets.token_bytes(32)  # this process's: a restart voids outstanding states
_MAX_STATE = 1024


@dataclass(frozen=True, slots=True)
class Prompt:
    """A pending approval that may be asked in band, and for how long."""

    approval: store.Approval

    @property
    def id(self) -> str:
        return self.approval.id

    def wait_s(self, now: float | None = None) -> float:
        """How long to wait for the answer: at most ``WAIT_S``, never past the expiry."""
        left = self.approval.expires_at - (time.time() if now is None else now)
        return max(0.0, min(WAIT_S, left))


def prompt(principal: Principal, exc: ApprovalRequired) -> Prompt | None:
    """The approval ``exc`` waits for, when the person at the client may decide it (None:
    it stays out of band)."""
    a = exc.approval
    if not isinstance(a, store.Approval) or not may_answer(principal, a):
        return None
    return Prompt(a)


def may_answer(principal: Principal, a: store.Approval) -> bool:
    """Whether the person at this principal's client may decide ``a`` in band."""
    return (
        a.state == "pending"
        and a.approver == "user"
        and not principal.operator
        and not principal.anonymous
        and a.principal == scope_of(principal)
        and a.user_id is not None
        and a.user_id == principal.user_id
    )


async def elicitation(rt: Runtime, p: Prompt) -> dict[str, Any]:
    """The params of the form-mode ``elicitation/create`` that asks for ``p``."""
    a = p.approval
    shown = await redaction.text(rt, a.arguments)
    if len(shown) > ARGUMENTS_SHOWN:
        shown = f"{shown[:ARGUMENTS_SHOWN]}… ({len(shown) - ARGUMENTS_SHOWN} more characters)"
    who = f"your agent {a.agent_name}" if a.agent_name else "your key"
    fee = credits(a.fee_milli)
    cost = "free" if not fee else f"{fee} credit{'' if fee == 1 else 's'}"
    message = (
        f"toolspoke asks for your approval: {who} wants to run {a.tool} ({a.kind}) of toolkit "
        f"{a.toolkit}. Arguments: {shown}. Cost: {cost}. Nothing runs unless you approve; "
        f"approval {a.id} covers this one call with exactly these arguments, until "
        f"{approvals.when(a.expires_at)}."
    )
    schema = {
        "type": "object",
        "properties": {
            FIELD: {
                "type": "boolean",
                "title": "Approve this call",
                "description": f"Run {a.tool} once, with the arguments shown",
                "default": False,
            }
        },
        "required": [FIELD],
    }
    return {"mode": "form", "message": message, "requestedSchema": schema}


def verdict(answer: Any) -> str:
    """What an ``ElicitResult`` says: ``approve``, ``deny`` (declined, or the form sent with
    no), or ``none`` (cancelled, malformed, absent: nothing decided)."""
    if not isinstance(answer, dict):
        return "none"
    action = answer.get("action")
    if action == "decline":
        return "deny"
    if action != "accept":
        return "none"
    content = answer.get("content")
    given = content.get(FIELD) if isinstance(content, dict) else None
    if given is True:
        return "approve"
    return "deny" if given is False else "none"


async def decide(rt: Runtime, principal: Principal, approval_id: str, approve: bool) -> bool:
    """The person's answer: a pending approval this principal may decide in band is approved
    or denied, with its audit row, in one transaction. False: nothing changed (it was not
    pending, or not theirs to decide in band); the retry's own check then says why."""
    now = time.time()
    event = "granted" if approve else "denied"
    by = f"{principal.name} in band"

    def work(w: Any) -> tuple[bool, int]:
        gone = approvals.expired(w, store.sweep(w, now))
        found = store.get(w, approval_id)
        if found is None or not may_answer(principal, found):
            return False, gone
        decided = store.decide(w, approval_id, approve, by, now)
        if decided is None:
            return False, gone
        insert_call(w, approvals.event_row(decided, event, now), None)
        return True, gone

    changed, gone = await rt.db.writing(work)
    approvals.counted(gone)
    if changed:
        approvals.counted(**{event: 1})
    return bool(changed)


# -- the 2026-07-28 request state ------------------------------------------------------------


def request_of(toolkit: Toolkit | None, params: dict[str, Any]) -> str:
    """The request a state is for: the endpoint, the tool name and the arguments as sent."""
    target = "bridge" if toolkit is None else f"toolkit:{toolkit.id}"
    name, arguments = params.get("name"), params.get("arguments")
    return request_hash(target, name if isinstance(name, str) else "", arguments if arguments else {})


def _mac(body: bytes) -> bytes:
    return hmac.new(_STATE_KEY, body, hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def seal(principal: Principal, p: Prompt, request: str) -> str:
    """The opaque ``requestState`` of an ``input_required`` result asking for ``p``."""
    a = p.approval
    body = orjson.dumps({"a": a.id, "p": scope_of(principal), "r": request, "e": a.expires_at})
    return f"{_b64(body)}.{_b64(_mac(body))}"


def seal_connect(principal: Principal, request: str, now: float | None = None) -> str:
    """The opaque ``requestState`` of an ``input_required`` result sending the caller's person
    to a toolkit's connect page. It carries no authority: the retry is served as a new call,
    which runs if the connection now exists (the pipeline checks it) and asks again if not."""
    expires = (time.time() if now is None else now) + CONNECT_S
    body = orjson.dumps({"k": CONNECT_KEY, "p": scope_of(principal), "r": request, "e": expires})
    return f"{_b64(body)}.{_b64(_mac(body))}"


def _bad() -> InvalidParams:
    return InvalidParams(
        "'requestState' is not one this server gave this caller, or it has expired: call again without it",
        field="requestState",
    )


def _opened(principal: Principal, state: Any, now: float | None = None) -> dict[str, Any]:
    """A state this process sealed for this principal and not yet expired (else InvalidParams)."""
    bad = _bad()
    if not isinstance(state, str) or len(state) > _MAX_STATE or state.count(".") != 1:
        raise bad
    head, mac = state.split(".")
    try:
        body, given = _unb64(head), _unb64(mac)
    except ValueError:
        raise bad from None
    if not hmac.compare_digest(_mac(body), given):
        raise bad
    doc = orjson.loads(body)
    if doc.get("p") != scope_of(principal) or float(doc.get("e", 0)) <= (time.time() if now is None else now):
        raise bad
    return dict(doc)


def connecting(principal: Principal, state: Any) -> bool:
    """Whether a retry's ``requestState`` is a connect state sealed for this principal (False:
    anything else, which the approval's checks then refuse or take)."""
    try:
        return _opened(principal, state).get("k") == CONNECT_KEY
    except InvalidParams:
        return False


def unseal(principal: Principal, state: Any, request: str, now: float | None = None) -> tuple[str, bool]:
    """The approval a retry's ``requestState`` names, and whether the retry is the request it
    was made for (False: other arguments, another tool or endpoint). Raises InvalidParams
    for a state this process did not seal for this principal, one past its expiry, or one
    that names no approval."""
    doc = _opened(principal, state, now)
    if doc.get("k", INPUT_KEY) != INPUT_KEY or "a" not in doc:
        raise _bad()
    return str(doc["a"]), hmac.compare_digest(str(doc.get("r", "")), request)
