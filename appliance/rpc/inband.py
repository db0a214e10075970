"""A ``tools/call`` that waits for a person's approval, answered in band where the client can
ask its user (issue 20 item 3); the rules are ``gateway/approvals_inband.py``'s.

- **2025 era** (a session whose client declared form-mode ``elicitation``; streamable HTTP
  with a session and an SSE-accepting POST, legacy SSE, stdio): the call sends
  ``elicitation/create`` on its own channel (``CallContext.elicit``, built by
  ``rpc/session.py``) and waits, bounded, for the answer. A yes approves the approval and
  the call runs once, through the pipeline with the approval named; a no denies it and the
  call is refused; no answer (cancel, timeout, an error) decides nothing and the call gets
  the out-of-band answer (the approval stays pending for the console).
- **2026-07-28** (a request that declared ``elicitation`` in its envelope): the call answers
  with an ``input_required`` result carrying the elicitation and a sealed ``requestState``;
  the client retries the same request with ``inputResponses``. The retry is checked first
  (the state, the principal, the request: other arguments are refused, nothing decided),
  then the answer decided, then the call run with the approval named, as any retry is.
- Otherwise (no capability, an approval that needs the toolkit's owner or an admin) the
  out-of-band answer: an ``isError`` result with the approval's id, queue URL and how to retry.

A call refused for want of the person's connection to a ``per_user`` toolkit (issue 19 item 2,
``ConnectionRequired``, nothing sent) sends the person to the console's Connections page the
way the protocol sanctions, where the client declared URL-mode elicitation and the page's URL
is absolute (``TOOLSPOKE_PUBLIC_URL``): a 2025-era session gets ``URLElicitationRequiredError``
(-32042) with the elicitation in ``data.elicitations``; a 2026-07-28 request gets an
``input_required`` result with a URL-mode elicitation and a sealed connect ``requestState``,
and its retry is served as a new call (it runs once connected, asks again if not, and a
declined or cancelled answer gets -32008). Otherwise -32008, as before.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import TYPE_CHECKING, Any

from appliance.errors import (
    ApprovalRefused,
    ApprovalRequired,
    ConnectionRequired,
    InvalidParams,
    Unauthorized,
    UrlElicitationRequired,
)
from appliance.gateway import approvals_inband as inband
from appliance.gateway import auth, tool_requests
from appliance.gateway.runtime import Runtime
from appliance.models import CallResult
from appliance.protocol import elicitation
from appliance.protocol.meta import APPROVAL_KEY

if TYPE_CHECKING:
    from appliance.rpc.mcp import CallContext


def retrying(ctx: CallContext, params: dict[str, Any]) -> bool:
    """Whether a 2026-07-28 ``tools/call`` is the retry of an ``input_required`` result."""
    return ctx.modern and (elicitation.REQUEST_STATE in params or elicitation.INPUT_RESPONSES in params)


def out_of_band(exc: ApprovalRequired | ApprovalRefused) -> CallResult:
    """The answer the model and the user read: the approval's id, queue URL and how to retry
    in ``_meta``."""
    text = [{"type": "text", "text": exc.public_message}]
    return CallResult(content=text, is_error=True, meta=exc.payload())


async def needed(
    rt: Runtime, ctx: CallContext, request: tool_requests.ToolsCall, exc: ApprovalRequired
) -> CallResult | dict[str, Any]:
    """The answer to a call that waits for a person: asked in band where the client can ask
    its user and the approval is theirs to give (a tool result, or 2026-07-28's
    ``input_required`` result as it goes on the wire), else out of band."""
    prompt = inband.prompt(ctx.principal, exc)
    if prompt is None:
        return out_of_band(exc)
    if ctx.modern:
        if not elicitation.asks_forms(ctx.client_capabilities):
            return out_of_band(exc)
        state = inband.seal(ctx.principal, prompt, inband.request_of(ctx.toolkit, request.params))
        return elicitation.input_required(inband.INPUT_KEY, await inband.elicitation(rt, prompt), state)
    if ctx.elicit is None:
        return out_of_band(exc)
    said = inband.verdict(await ctx.elicit(await inband.elicitation(rt, prompt), prompt.wait_s()))
    if said == "none":
        return out_of_band(exc)  # nothing decided: the approval waits for the console
    try:
        await auth.still_live(rt, ctx.principal)  # the wait may have outlived the caller's key
    except Unauthorized as exc:  # revoked or expired meanwhile: nothing decided, nothing run
        text = f"{exc.public_message}; the answer was not taken and nothing was run"
        return CallResult(content=[{"type": "text", "text": text}], is_error=True, meta=exc.payload())
    await inband.decide(rt, ctx.principal, prompt.id, said == "approve")
    return await _run_named(rt, request, prompt.id)


def asker(rt: Runtime, ctx: CallContext) -> tool_requests.Ask | None:
    """How a script's call that waits for a person pauses its run and asks (``gateway/
    code_runs.py``): on a 2025-era session whose client takes elicitation, the same question
    as for a direct call; the approval decided (yes or no) comes back and the call goes on
    naming it. None where a run cannot pause (2026-07-28 is stateless: its input_required is
    the request's end, so the run ends and the same script runs again once approved)."""
    if ctx.modern or ctx.elicit is None:
        return None
    elicit = ctx.elicit

    async def ask(exc: ApprovalRequired) -> str | None:
        prompt = inband.prompt(ctx.principal, exc)
        if prompt is None:
            return None  # not this person's to give: the run ends, the approval waits
        said = inband.verdict(await elicit(await inband.elicitation(rt, prompt), prompt.wait_s()))
        if said == "none":
            return None
        await auth.still_live(rt, ctx.principal)  # the wait may have outlived the caller's key
        await inband.decide(rt, ctx.principal, prompt.id, said == "approve")
        return prompt.id

    return ask


def connection_needed(
    ctx: CallContext, request: tool_requests.ToolsCall, exc: ConnectionRequired
) -> dict[str, Any]:
    """The answer to a call refused for want of the person's connection: 2026-07-28's
    ``input_required`` result (as it goes on the wire) sending them to the connect page, or
    raises: -32042 for a 2025-era session that takes URL mode, else ``exc`` itself (-32008)."""
    url = exc.data.get("connect_url")
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        raise exc  # no public URL: a relative path is no page a client could open
    slug, project = exc.data.get("toolkit"), exc.data.get("project")
    message = (
        f"Toolkit {slug!r} (project {project!r}) acts as each person: connect your own account "
        "on this toolspoke page, then retry the call. Nothing was sent."
    )
    if ctx.modern:
        if not elicitation.asks_urls(ctx.client_capabilities) or _declined(request.params):
            raise exc
        state = inband.seal_connect(ctx.principal, inband.request_of(ctx.toolkit, request.params))
        return elicitation.input_required(inband.CONNECT_KEY, elicitation.url_params(url, message), state)
    if not ctx.asks_urls:
        raise exc
    asked = elicitation.url_params(url, message, secrets.token_urlsafe(16))
    raise UrlElicitationRequired(exc.public_message, data={**exc.data, "elicitations": [asked]})


def _declined(params: dict[str, Any]) -> bool:
    """Whether a retry answers the connect elicitation with a decline or a cancel."""
    responses = params.get(elicitation.INPUT_RESPONSES)
    answer = responses.get(inband.CONNECT_KEY) if isinstance(responses, dict) else None
    return isinstance(answer, dict) and answer.get("action") in ("decline", "cancel")


async def resume(rt: Runtime, ctx: CallContext, request: tool_requests.ToolsCall) -> CallResult:
    """A 2026-07-28 retry carrying the answer: checked, decided, run with the approval named.
    The retry of a connect elicitation is served as a new call (its state carries no right)."""
    params = request.params
    if inband.connecting(ctx.principal, params.get(elicitation.REQUEST_STATE)):
        return await tool_requests.serve(rt, request)
    try:
        approval_id, same = inband.unseal(
            ctx.principal, params.get(elicitation.REQUEST_STATE), inband.request_of(ctx.toolkit, params)
        )
        if not same:
            raise ApprovalRefused(
                "this retry is not the call the approval was asked for (other arguments, another "
                "tool or endpoint); nothing was run. Call again without 'requestState' to ask anew.",
                reason="approval_mismatch",
                data={"approval_id": approval_id},
            )
    except (ApprovalRefused, InvalidParams) as exc:
        await tool_requests.refused(rt, ctx.principal, params, exc)  # an attempt: its audit row
        if isinstance(exc, ApprovalRefused):
            return out_of_band(exc)
        raise
    responses = params.get(elicitation.INPUT_RESPONSES)
    answer = responses.get(inband.INPUT_KEY) if isinstance(responses, dict) else None
    said = inband.verdict(answer)
    if said != "none":
        await inband.decide(rt, ctx.principal, approval_id, said == "approve")
    return await _run_named(rt, request, approval_id)


async def _run_named(rt: Runtime, request: tool_requests.ToolsCall, approval_id: str) -> CallResult:
    """The call again, naming its approval: the pipeline checks the binding and uses it up,
    or refuses with nothing sent (denied: ``approval_denied``; still pending: out of band)."""
    meta = request.params.get("_meta")
    named = {**(meta if isinstance(meta, dict) else {}), APPROVAL_KEY: approval_id}
    retry = dataclasses.replace(request, params={**request.params, "_meta": named})
    try:
        return await tool_requests.serve(rt, retry)
    except (ApprovalRequired, ApprovalRefused) as exc:
        return out_of_band(exc)
