"""The MCP conformance suite's fixture server, on the official SDK (test-only).

``@modelcontextprotocol/conformance`` in server mode expects fixed tool, resource and
prompt names (``test_simple_text``, ``test://static-text``, ``test_simple_prompt``, ...).
This server implements them, so the suite can run against the gateway with this server
imported as an MCP toolkit, without any code from outside the project.

    python tests/support/conformance_server.py --port 8800        # http://127.0.0.1:8800/mcp
    python tests/support/conformance_server.py --transport stdio

It binds 127.0.0.1 (the SDK then turns on its DNS-rebinding protection). Behaviour follows
the descriptions of the scenarios in the suite (``conformance list`` names them).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.shared.exceptions import MCPError
from mcp.types import (
    AudioContent,
    Completion,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    JSONRPCMessage,
    SamplingMessage,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, Field

# A 1x1 PNG and a minimal WAV: what the suite's reference servers return.
PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV_TINY = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
SCHEMA_2020_12 = "https://json-schema.org/draft/2020-12/schema"
JSON_SCHEMA_TOOL_INPUT: dict[str, Any] = {
    "$schema": SCHEMA_2020_12,
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}

server: MCPServer[Any] = MCPServer(name="toolspoke-conformance-fixture", version="1.0.0")
subscriptions: set[str] = set()


class MemoryEventStore(EventStore):
    """Keeps every SSE event so that a client reconnecting with Last-Event-ID gets the rest."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = str(len(self.events) + 1)
        self.events.append((stream_id, event_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        stream = next((s for s, e, _ in self.events if e == last_event_id), None)
        if stream is None:
            return None
        for s, event_id, message in self.events:
            if s == stream and int(event_id) > int(last_event_id) and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


# Tools -----------------------------------------------------------------------------------


@server.tool()
def test_simple_text() -> str:
    """Returns one text content block."""
    return "This is a simple text response for testing."


@server.tool()
def test_image_content() -> list[ImageContent]:
    """Returns one PNG image content block."""
    return [ImageContent(type="image", data=PNG_1PX, mime_type="image/png")]


@server.tool()
def test_audio_content() -> list[AudioContent]:
    """Returns one WAV audio content block."""
    return [AudioContent(type="audio", data=WAV_TINY, mime_type="audio/wav")]


@server.tool()
def test_embedded_resource() -> list[EmbeddedResource]:
    """Returns one embedded text resource."""
    resource = TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return [EmbeddedResource(type="resource", resource=resource)]


@server.tool()
def test_multiple_content_types() -> list[TextContent | ImageContent | EmbeddedResource]:
    """Returns text, an image and an embedded resource together."""
    resource = TextResourceContents(
        uri="test://mixed-content-resource",
        mime_type="application/json",
        text='{"test": "data", "value": 123}',
    )
    return [
        TextContent(type="text", text="Multiple content types test:"),
        ImageContent(type="image", data=PNG_1PX, mime_type="image/png"),
        EmbeddedResource(type="resource", resource=resource),
    ]


@server.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Sends three info log notifications while it runs."""
    for i, text in enumerate(("Tool execution started", "Tool processing data", "Tool execution completed")):
        if i:
            await asyncio.sleep(0.05)
        await ctx.info(text)
    return "Tool with logging executed successfully"


@server.tool()
async def test_logging_tool(ctx: Context) -> str:
    """Logs at once (no delays): the 2026-07-28 check that no log arrives without a level."""
    for text in ("Logging tool started", "Logging tool working", "Logging tool done"):
        await ctx.info(text)
    return "Logging tool executed successfully"


@server.tool()
def test_custom_header_tool(
    region: Annotated[
        str, Field(description="Mirrored into Mcp-Param-Region", json_schema_extra={"x-mcp-header": "Region"})
    ],
    query: str = "",
) -> str:
    """SEP-2243: its region argument travels in the Mcp-Param-Region header too."""
    return f"region={region} query={query}"


def _require(ctx: Context, capability: str) -> None:
    """-32021 with ``requiredCapabilities`` when the caller did not declare ``capability``."""
    declared = ctx.session.client_capabilities
    if declared is None or getattr(declared, capability, None) is None:
        raise MCPError(
            code=-32021,
            message=f"Client did not declare the {capability} capability",
            data={"requiredCapabilities": {capability: {}}},
        )


@server.tool()
def test_missing_capability(ctx: Context) -> str:
    """Needs the caller's sampling capability (SEP-2575: -32021 when it was not declared)."""
    _require(ctx, "sampling")
    return "the sampling capability was declared"


@server.tool()
def test_streaming_elicitation(ctx: Context) -> str:
    """Needs the caller's elicitation capability; never sends a request on the response stream."""
    _require(ctx, "elicitation")
    return "the elicitation capability was declared"


@server.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Reports progress 0, 50 and 100 of 100 when the caller sent a progress token."""
    for i, done in enumerate((0, 50, 100)):
        if i:
            await asyncio.sleep(0.05)
        await ctx.report_progress(done, 100, f"Completed step {done} of 100")
    return "Tool with progress executed successfully"


@server.tool()
def test_error_handling() -> str:
    """Always fails: an isError result."""
    raise RuntimeError("This tool intentionally returns an error for testing")


@server.tool()
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Asks the client's LLM (sampling/createMessage) and returns its answer."""
    try:
        result = await ctx.session.create_message(
            messages=[SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
            max_tokens=100,
        )
    except Exception as exc:
        return f"Sampling not supported or error: {exc}"
    content = result.content
    text = content.text if isinstance(content, TextContent) else "No response"
    return f"LLM response: {text}"


class UserResponse(BaseModel):
    response: str = Field(description="User's response")


@server.tool()
async def test_elicitation(message: str, ctx: Context) -> str:
    """Asks the user (elicitation/create) and returns the answer."""
    try:
        result = await ctx.elicit(message=message, schema=UserResponse)
    except Exception as exc:
        return f"Elicitation not supported or error: {exc}"
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"User response: action={result.action}, content={content}"


class Defaults(BaseModel):
    name: str = Field(default="John Doe", description="User name")
    age: int = Field(default=30, description="User age")
    score: float = Field(default=95.5, description="User score")
    status: str = Field(
        default="active",
        description="User status",
        json_schema_extra={"enum": ["active", "inactive", "pending"]},
    )
    verified: bool = Field(default=True, description="Verification status")


@server.tool()
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Elicitation with a default for every primitive type (SEP-1034)."""
    try:
        result = await ctx.elicit(message="Please provide user information", schema=Defaults)
    except Exception as exc:
        return f"Elicitation not supported or error: {exc}"
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"Elicitation result: action={result.action}, content={content}"


class Enums(BaseModel):
    untitledSingle: str = Field(
        description="Simple enum without titles",
        json_schema_extra={"enum": ["active", "inactive", "pending"]},
    )
    titledSingle: str = Field(
        description="Enum with titled options (oneOf)",
        json_schema_extra={
            "oneOf": [
                {"const": "low", "title": "Low Priority"},
                {"const": "medium", "title": "Medium Priority"},
                {"const": "high", "title": "High Priority"},
            ]
        },
    )
    untitledMulti: list[str] = Field(
        description="Multi-select without titles",
        json_schema_extra={"items": {"type": "string", "enum": ["read", "write", "execute"]}},
    )
    titledMulti: list[str] = Field(
        description="Multi-select with titled options",
        json_schema_extra={
            "items": {
                "anyOf": [
                    {"const": "feature", "title": "New Feature"},
                    {"const": "bug", "title": "Bug Fix"},
                    {"const": "docs", "title": "Documentation"},
                ]
            }
        },
    )
    legacyEnum: str = Field(
        description="Legacy enum with enumNames",
        json_schema_extra={
            "enum": ["small", "medium", "large"],
            "enumNames": ["Small Size", "Medium Size", "Large Size"],
        },
    )


@server.tool()
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Elicitation with the enum schema variants of SEP-1330."""
    try:
        result = await ctx.elicit(
            message="Please select values using different enum schema types", schema=Enums
        )
    except Exception as exc:
        return f"Elicitation not supported or error: {exc}"
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"Elicitation completed: action={result.action}, content={content}"


@server.tool()
async def test_reconnection(ctx: Context) -> str:
    """Closes its SSE stream mid-call; the client resumes with Last-Event-ID (SEP-1699)."""
    await ctx.info("Before disconnect")
    await ctx.close_sse_stream()
    await asyncio.sleep(0.2)
    await ctx.info("After reconnect")
    return "Reconnection test completed"


@server.tool(name="json_schema_2020_12_tool", description="Tool with JSON Schema 2020-12 features")
def json_schema_2020_12_tool(
    name: str | None = None,
    address: dict[str, Any] | None = None,
    contactMethod: str | None = None,
    phone: str | None = None,
    email: str | None = None,
) -> str:
    """Its input schema (set below) uses $defs, $anchor, allOf/anyOf and if/then/else."""
    return f"contact {name or 'someone'} by {contactMethod or 'any means'}"


# The decorator derives a schema from the signature; the suite checks these keywords verbatim.
_schema_tool = server._tool_manager.get_tool("json_schema_2020_12_tool")
assert _schema_tool is not None
_schema_tool.parameters = JSON_SCHEMA_TOOL_INPUT


# Resources and prompts -------------------------------------------------------------------


@server.resource("test://static-text", mime_type="text/plain")
def static_text() -> str:
    """A static text resource."""
    return "This is the content of the static text resource."


@server.resource("test://static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A static binary resource (a PNG)."""
    return base64.b64decode(PNG_1PX)


@server.resource("test://template/{id}/data", mime_type="application/json")
def template_data(id: str) -> str:
    """A templated resource: the id is substituted."""
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@server.resource("test://watched-resource", mime_type="text/plain")
def watched() -> str:
    """A resource clients can subscribe to."""
    return "Watched resource content"


@server.prompt()
def test_simple_prompt() -> list[UserMessage]:
    """A prompt without arguments."""
    return [UserMessage(content=TextContent(type="text", text="This is a simple prompt for testing."))]


@server.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
    """A prompt with two required arguments."""
    text = f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
    return [UserMessage(content=TextContent(type="text", text=text))]


@server.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
    """A prompt that embeds a resource."""
    resource = TextResourceContents(
        uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
    )
    return [
        UserMessage(content=EmbeddedResource(type="resource", resource=resource)),
        UserMessage(content=TextContent(type="text", text="Please process the embedded resource above.")),
    ]


@server.prompt()
def test_prompt_with_image() -> list[UserMessage]:
    """A prompt with an image."""
    return [
        UserMessage(content=ImageContent(type="image", data=PNG_1PX, mime_type="image/png")),
        UserMessage(content=TextContent(type="text", text="Please analyze the image above.")),
    ]


@server.completion()
async def complete(ref: Any, argument: Any, context: Any) -> Completion:
    return Completion(values=[], total=0, has_more=False)


async def _set_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
    return EmptyResult()


async def _subscribe(ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
    subscriptions.add(str(params.uri))
    return EmptyResult()


async def _unsubscribe(ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
    subscriptions.discard(str(params.uri))
    return EmptyResult()


_low = server._lowlevel_server
_low.add_request_handler("logging/setLevel", SetLevelRequestParams, _set_level)
_low.add_request_handler("resources/subscribe", SubscribeRequestParams, _subscribe)
_low.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, _unsubscribe)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--transport", choices=["streamable-http", "stdio"], default="streamable-http")
    parser.add_argument("--port", type=int, default=8800)
    args = parser.parse_args()
    if args.transport == "stdio":
        server.run("stdio")
        return

    import uvicorn

    app = server.streamable_http_app(event_store=MemoryEventStore(), retry_interval=100, host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
