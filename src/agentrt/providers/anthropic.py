"""A model behind the Anthropic Messages API, streamed.

One request is ``POST {base_url}/v1/messages`` with ``stream: true`` and the
headers ``x-api-key`` and ``anthropic-version: 2023-06-01``. The reply is a
server-sent event stream: ``message_start`` (input usage), then per content
block ``content_block_start`` (``text`` or ``tool_use`` with its id and name),
``content_block_delta`` (``text_delta`` or ``input_json_delta`` carrying
``partial_json``), ``content_block_stop``; then ``message_delta`` (stop reason,
output usage) and ``message_stop``. ``ping`` may come at any time, and
``error`` reports a failure after the 200 (``overloaded_error`` and friends).

The transcript maps onto the API's shape: system messages go to the top-level
``system`` field, assistant tool calls become ``tool_use`` blocks, and tool
results become ``tool_result`` blocks in a ``user`` message; consecutive
messages of one role are merged, since results of parallel calls must all sit
in the one user message that follows the assistant's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs
import httpx

from .._messages import (
    Message,
    ModelDelta,
    ModelResponse,
    OnDelta,
    Role,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from .._retry import RetryPolicy
from ._http import (
    DEFAULT_RETRY,
    DEFAULT_TIMEOUT,
    Api,
    ErrorContext,
    ModelAuthError,
    ModelNotFoundError,
    ModelRateLimitError,
    ModelRequestError,
    ModelServerError,
    ModelStreamCutError,
    ModelStreamError,
    ProviderError,
    Redactor,
    SSEEvent,
    parse_arguments,
    parse_json_event,
    server_message,
    stream_completion,
)

#: The hosted Anthropic API.
DEFAULT_ANTHROPIC_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
ANTHROPIC_KEY_ENV = "ANTHROPIC_API_KEY"
ANTHROPIC_KEY_SECRET = "anthropic_api_key"
_PROVIDER = "Anthropic API"
_API = Api(
    _PROVIDER, DEFAULT_ANTHROPIC_URL, "Anthropic API", ANTHROPIC_KEY_ENV, ANTHROPIC_KEY_SECRET
)


@attrs.define(eq=False)
class AnthropicModel:
    """A `Model` over the Anthropic Messages API.

    `max_tokens` is required by the API; 4096 suits every current model. The
    hosted API without a key fails before sending anything. `repr` never shows
    the key. Each `complete` uses its own connection, which a cancel closes at once.
    """

    model: str
    base_url: str = DEFAULT_ANTHROPIC_URL
    _api_key: str | None = attrs.field(default=None, alias="api_key", repr=False)
    retry: RetryPolicy = DEFAULT_RETRY
    timeout: httpx.Timeout = DEFAULT_TIMEOUT
    max_tokens: int = 4096

    @property
    def name(self) -> str:
        """``"anthropic:<model>"``."""
        return f"anthropic:{self.model}"

    @property
    def url(self) -> str:
        """The messages endpoint requests go to (a base URL ending in ``/v1`` is accepted too)."""
        base = self.base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        return base + "/v1/messages"

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        on_delta: OnDelta,
    ) -> ModelResponse:
        """Stream one response, delivering text and tool-call deltas as they arrive."""
        headers = {"accept": "text/event-stream", "anthropic-version": ANTHROPIC_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        system, turns = anthropic_messages(messages)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": turns,
            "stream": True,
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [anthropic_tool(t) for t in tools]
        return await stream_completion(
            _API,
            model=self.model,
            base_url=self.base_url,
            url=self.url,
            api_key=self._api_key,
            headers=headers,
            body=body,
            reader=lambda ctx, redactor: _Reader(redactor, ctx),
            retry=self.retry,
            http_timeout=self.timeout,
            on_delta=on_delta,
        )


def anthropic_tool(tool: ToolSpec) -> dict[str, Any]:
    """A tool in the ``tools`` list of a messages request."""
    return {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}


def anthropic_messages(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """Our transcript as the API's ``system`` text and ``messages`` list."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for m in messages:
        if m.role is Role.SYSTEM:
            system.append(m.content)
            continue
        blocks: list[dict[str, Any]] = []
        if m.role is Role.TOOL:
            role = "user"
            blocks.append(
                {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}
            )
        else:
            role = m.role.value
            # The API rejects empty text blocks.
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            blocks.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in m.tool_calls
            )
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(system), turns


_ERROR_TYPES: dict[str, type[ProviderError]] = {
    "overloaded_error": ModelServerError,
    "api_error": ModelServerError,
    "rate_limit_error": ModelRateLimitError,
    "authentication_error": ModelAuthError,
    "permission_error": ModelAuthError,
    "not_found_error": ModelNotFoundError,
}


@attrs.define
class _Tool:
    id: str
    name: str
    arguments: list[str] = attrs.field(factory=list)


@attrs.define(eq=False)
class _Reader:
    """One reply's events, accumulated."""

    redactor: Redactor
    ctx: ErrorContext
    done: bool = False
    _started: bool = False
    _text: list[str] = attrs.field(factory=list)
    #: Content block index -> position among this reply's tool calls.
    _tool_of_block: dict[int, int] = attrs.field(factory=dict)
    _tools: list[_Tool] = attrs.field(factory=list)
    _input_tokens: int = 0
    _output_tokens: int = 0

    def handle(self, event: SSEEvent) -> list[ModelDelta]:
        data = parse_json_event(event, _PROVIDER)
        kind = data.get("type", event.event)
        if kind == "error":
            raise self._error(data)
        if kind == "message_start":
            self._started = True
            message = data.get("message") or {}
            self._count(message.get("usage"))
        elif kind == "content_block_start":
            return self._block_start(data)
        elif kind == "content_block_delta":
            return self._block_delta(data)
        elif kind == "message_delta":
            self._count(data.get("usage"))
        elif kind == "message_stop":
            self.done = True
        # ping, content_block_stop and event types added later carry nothing we need.
        return []

    def _count(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        # Cached prompt tokens are still prompt tokens the model read.
        inputs = [
            usage.get(k)
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        ]
        if any(isinstance(v, int) for v in inputs):
            self._input_tokens = sum(v for v in inputs if isinstance(v, int))
        # output_tokens in message_delta is the running total, not an increment.
        if isinstance(usage.get("output_tokens"), int):
            self._output_tokens = usage["output_tokens"]

    def _block_start(self, data: dict[str, Any]) -> list[ModelDelta]:
        block = data.get("content_block") or {}
        index = data.get("index")
        if block.get("type") == "text":
            text = block.get("text") or ""
            if text:
                self._text.append(text)
                return [TextDelta(text)]
        elif block.get("type") == "tool_use":
            if not isinstance(index, int) or not block.get("name") or not block.get("id"):
                raise ModelStreamError(f"{_PROVIDER} started a tool_use block without id or name")
            position = len(self._tools)
            self._tool_of_block[index] = position
            tool = _Tool(str(block["id"]), str(block["name"]))
            self._tools.append(tool)
            return [ToolCallDelta(index=position, id=tool.id, name=tool.name)]
        return []

    def _block_delta(self, data: dict[str, Any]) -> list[ModelDelta]:
        delta = data.get("delta") or {}
        if delta.get("type") == "text_delta":
            text = delta.get("text")
            if isinstance(text, str) and text:
                self._text.append(text)
                return [TextDelta(text)]
        elif delta.get("type") == "input_json_delta":
            position = self._tool_of_block.get(data.get("index", -1))
            if position is None:
                raise ModelStreamError(
                    f"{_PROVIDER} sent tool input for a block that is not a tool_use block"
                )
            piece = delta.get("partial_json")
            if isinstance(piece, str) and piece:
                self._tools[position].arguments.append(piece)
                return [ToolCallDelta(index=position, arguments=piece)]
        return []

    def _error(self, data: dict[str, Any]) -> ProviderError:
        error = data.get("error") or {}
        kind = error.get("type") if isinstance(error, dict) else None
        said = server_message(json.dumps(data).encode(), self.redactor)
        cls = _ERROR_TYPES.get(str(kind), ModelRequestError)
        hint = {
            ModelServerError: "the server failed; try again later",
            ModelRateLimitError: "rate limited; wait and try again",
            ModelAuthError: f"check the key in {self.ctx.api.key_env}",
            ModelNotFoundError: f"check the model name {self.ctx.model!r}",
        }.get(cls, "the request was refused")
        return cls(f"{_PROVIDER} reported {kind or 'an error'}: {said} ({hint})")

    def finish(self) -> ModelResponse:
        if not self.done:
            raise ModelStreamCutError(
                f"{_PROVIDER} ended the stream before message_stop; the reply is incomplete"
            )
        calls = tuple(
            ToolCall(t.id, t.name, parse_arguments("".join(t.arguments), t.name, _PROVIDER))
            for t in self._tools
        )
        usage = Usage(self._input_tokens, self._output_tokens) if self._started else None
        return ModelResponse("".join(self._text), calls, usage)
