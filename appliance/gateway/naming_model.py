"""The operator's chat model names and describes inferred tools, or the examples' names stay.

Off unless ``infer_chat_url`` is set. After an examples import has inferred its tools
without a model (``catalogue/examples_infer.py``), ``NamingModel.name`` asks an
OpenAI-compatible ``POST {url}/chat/completions`` for a snake_case name and one sentence per
tool, ``BATCH`` tools a request. What it sends is ``catalogue/examples_naming.facts``
(method, path template, parameter names and types, the body's schema: no value from the
examples), passed through the import's ``Redactor`` (the examples' credential values and
every vault secret) as a second line of defence. The request leaves through an
``OperatorEgress`` (``gateway/operator_egress.py``): the egress guard with exactly the
configured origin opened, a pinned connection, no redirects, the answer capped at
``ANSWER_MAX_BYTES``, ``infer_chat_timeout_s`` per request.

Nothing the model answers can fail the import: a refused, late, failed or malformed answer
leaves the tools it was asked about with the names and descriptions from the examples, and
says so in a note; after a transport failure the other batches are not asked. A JSON
``response_format`` is asked for; an endpoint that answers 400 to it is asked once more
without one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from appliance.catalogue import examples_naming as naming
from appliance.config import Settings
from appliance.egress.guard import EgressPolicy, Resolver
from appliance.errors import ConfigError, UpstreamError
from appliance.gateway.operator_egress import OperatorEgress
from appliance.models import ToolDraft
from appliance.secret import Redactor, Secret

log = logging.getLogger(__name__)
ENDPOINT = "the naming model's endpoint"
KEPT = "the tools keep the names and descriptions inferred from the examples"


class NamingUnavailable(Exception):
    """The endpoint gave no answer to use (refused, late, unreachable, an HTTP error)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Named:
    tools: list[ToolDraft]
    renamed: dict[str, str] = field(default_factory=dict)  # the examples' name → the model's
    origins: dict[str, dict[str, str]] = field(default_factory=dict)  # by final name
    notes: list[str] = field(default_factory=list)


class NamingModel:
    """The configured chat endpoint. ``resolver`` is for tests (scripted DNS)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: Secret | None = None,
        timeout_s: float = 60.0,
        resolver: Resolver | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError("infer_chat_url must start with http:// or https://", field="infer_chat_url")
        try:  # a URL the guard refuses in its shape stops start-up, naming the setting
            EgressPolicy.for_operator_origin(base_url, field="infer_chat_url", resolver=resolver)
        except UpstreamError as exc:
            raise ConfigError(f"infer_chat_url: {exc.public_message}", field="infer_chat_url") from None
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s
        self._key = api_key
        self._resolver = resolver

    def __repr__(self) -> str:
        return f"NamingModel({self.model!r})"

    @classmethod
    def from_settings(cls, settings: Settings) -> NamingModel | None:
        if not settings.infer_chat_url:
            return None
        if not settings.infer_chat_model:
            raise ConfigError("infer_chat_url needs infer_chat_model", field="infer_chat_model")
        return cls(
            settings.infer_chat_url,
            settings.infer_chat_model,
            api_key=settings.infer_chat_api_key,
            timeout_s=settings.infer_chat_timeout_s,
        )

    async def name(self, tools: Sequence[ToolDraft], *, slug: str, redactor: Redactor) -> Named:
        """``tools`` named and described where the model's answer holds up; never raises for it."""
        proposals: dict[str, naming.Proposal] = {}
        notes: list[str] = []
        batches = [tools[i : i + naming.BATCH] for i in range(0, len(tools), naming.BATCH)]
        egress = OperatorEgress(
            self.base_url,
            field="infer_chat_url",
            endpoint=ENDPOINT,
            error=NamingUnavailable,
            resolver=self._resolver,
        )
        try:
            for number, batch in enumerate(batches):
                asked = {f"t{i + 1}": t.name for i, t in enumerate(batch)}
                endpoints = redactor.value(
                    [naming.facts(t, ident) for ident, t in zip(asked, batch, strict=True)]
                )
                try:
                    raw = await self._ask(egress, naming.messages(endpoints, slug))
                    answer = naming.parse_answer(raw, asked, slug)
                except NamingUnavailable as exc:
                    left = sum(len(b) for b in batches[number:])
                    notes.append(f"the naming model was not used for {left} tool(s): {exc.reason}; {KEPT}")
                    log.warning("naming model: %s", exc.reason)
                    break
                except naming.NamingFailed as exc:
                    notes.append(
                        f"the naming model's answer for {len(batch)} tool(s) was refused: {exc.reason}; "
                        f"{KEPT}"
                    )
                    log.warning("naming model: %s", exc.reason)
                    continue
                notes += answer.notes
                proposals.update({asked[i]: p for i, p in answer.proposals.items()})
        finally:
            await egress.aclose()
        applied = naming.apply(tools, slug, proposals)
        notes += applied.notes
        named = sum(1 for o in applied.origins.values() if "model" in o.values())
        if named:
            notes.insert(0, f"{named} of {len(tools)} tool(s) named or described by the model {self.model}")
        return Named(applied.tools, applied.renamed, applied.origins, [redactor.text(n) for n in notes])

    async def _ask(self, egress: OperatorEgress, messages: list[dict[str, str]]) -> bytes:
        body: dict[str, object] = {
            "model": self.model,
            "messages": messages,
            "temperature": 0,
            "response_format": {"type": "json_object"},
        }
        status, raw = await self._post(egress, body)
        if status == 400:  # an endpoint without JSON mode: once more, without asking for it
            del body["response_format"]
            status, raw = await self._post(egress, body)
        if status != 200:
            raise NamingUnavailable(f"{ENDPOINT} answered HTTP {status}")
        return raw

    async def _post(self, egress: OperatorEgress, body: dict[str, object]) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key is not None:
            headers["Authorization"] = f"Bearer {self._key.reveal()}"
        return await egress.post(
            f"{self.base_url}/chat/completions",
            headers,
            orjson.dumps(body),
            timeout_s=self.timeout_s,
            max_bytes=naming.ANSWER_MAX_BYTES,
        )
