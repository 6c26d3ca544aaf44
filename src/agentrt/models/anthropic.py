"""A model behind the Anthropic Messages API, streamed.

One request is ``POST {base_url}/v1/messages`` with ``stream: true`` and the
headers ``x-api-key`` and ``anthropic-version: 2023-06-01``. The reply is a
server-sent event stream: ``message_start`` (input usage), then per content
block ``content_block_start`` (``text`` or ``tool_use`` with its id and name),
``content_block_delta`` (``text_delta`` or ``input_json_delta`` carrying
``partial_json``), ``content_block_stop``; then ``message_delta`` (stop reason,
output usage) and ``message_stop``. ``ping`` may come at any time, and
``error`` reports a failure after the 200 (``overloaded_error`` and friends).

Extended thinking (`thinking_budget`) adds ``thinking`` blocks, streamed as
``thinking_delta`` and closed by a ``signature_delta``, and now and then a
``redacted_thinking`` block holding only encrypted ``data``. The reasoning is
delivered as `ReasoningDelta`; the blocks, signature included, are kept on the
assistant message (`ThinkingBlock`) and sent back first in that message on
later turns, unchanged, as the API requires during a round of tool calls.

Prompt caching (on by default) marks three breakpoints with ``cache_control:
{"type": "ephemeral"}``: the system prompt, the last tool, and the last block
of the last turn, so each request reads the conversation so far from the
cache and writes the new turn to it. ``message_start`` then reports
``cache_read_input_tokens`` and ``cache_creation_input_tokens`` beside the
uncached ``input_tokens``.

The transcript maps onto the API's shape: system messages go to the top-level
``system`` field, assistant tool calls become ``tool_use`` blocks, and tool
results become ``tool_result`` blocks in a ``user`` message; consecutive
messages of one role are merged, since results of parallel calls must all sit
in the one user message that follows the assistant's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import attrs
import httpx

from ..config.retry import RetryPolicy
from ..vocab.reprs import mutable
from .messages import Message
from .messages import ModelDelta
from .messages import ModelResponse
from .messages import ReasoningDelta
from .messages import Role
from .messages import TextDelta
from .messages import ThinkingBlock
from .messages import ToolCall
from .messages import ToolCallDelta
from .messages import ToolSpec
from .messages import Usage
from .streaming import DEFAULT_RETRY
from .streaming import DEFAULT_TIMEOUT
from .streaming import Api
from .streaming import ErrorContext
from .streaming import ModelAuthError
from .streaming import ModelCall
from .streaming import ModelNotFoundError
from .streaming import ModelRateLimitError
from .streaming import ModelRequestError
from .streaming import ModelServerError
from .streaming import ModelStreamCutError
from .streaming import ModelStreamError
from .streaming import ProviderError
from .streaming import Redactor
from .streaming import SSEEvent
from .streaming import StreamedModel
from .streaming import cut_at_max_tokens
from .streaming import merge_headers
from .streaming import parse_arguments
from .streaming import parse_json_event
from .streaming import server_message

#: The hosted Anthropic API.
DEFAULT_ANTHROPIC_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
ANTHROPIC_KEY_ENV = "ANTHROPIC_API_KEY"
ANTHROPIC_KEY_SECRET = "anthropic_api_key"
_PROVIDER = "Anthropic API"
_API = Api(
    _PROVIDER, DEFAULT_ANTHROPIC_URL, "Anthropic API", ANTHROPIC_KEY_ENV, ANTHROPIC_KEY_SECRET
)


#: What marks a prompt caching breakpoint.
EPHEMERAL = {"type": "ephemeral"}
#: The smallest thinking budget the API takes.
MIN_THINKING_BUDGET = 1024


@mutable(eq=False)
class AnthropicModel(StreamedModel):
    """A `Model` over the Anthropic Messages API.

    `complete` streams text, thinking and tool-call deltas as they arrive.
    `max_tokens` is required by the API; 4096 suits every current model.
    `thinking_budget` turns on extended thinking with that many tokens to think
    (at least 1024, and less than `max_tokens`). `prompt_caching` marks the
    system prompt, the tools and the last turn for the prompt cache. `headers`
    are sent with every request and override ours (a gateway's, a beta flag);
    a header named like a credential is scrubbed from error text like the key.
    The hosted API without a key fails before sending anything. `repr` never
    shows the key or the headers. Each `complete` uses its own connection,
    which a cancel closes at once.
    """

    model: str
    base_url: str = DEFAULT_ANTHROPIC_URL
    _api_key: str | None = attrs.field(default=None, alias="api_key", repr=False)
    retry: RetryPolicy = DEFAULT_RETRY
    timeout: httpx.Timeout = DEFAULT_TIMEOUT
    max_tokens: int = 4096
    thinking_budget: int | None = None
    prompt_caching: bool = True
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)

    def __attrs_post_init__(self) -> None:
        merge_headers({}, self.headers)  # a header that cannot be sent fails here, not mid-run
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, not {self.max_tokens!r}")
        budget = self.thinking_budget
        if budget is not None and not MIN_THINKING_BUDGET <= budget < self.max_tokens:
            raise ValueError(
                f"thinking_budget must be at least {MIN_THINKING_BUDGET} and less than"
                f" max_tokens ({self.max_tokens}), not {budget}"
            )

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

    def call(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelCall:
        """The streaming request for `messages`, offering `tools`."""
        base = {"accept": "text/event-stream", "anthropic-version": ANTHROPIC_VERSION}
        if self._api_key:
            base["x-api-key"] = self._api_key
        limit = self.max_tokens
        return ModelCall(
            _API,
            model=self.model,
            base_url=self.base_url,
            url=self.url,
            api_key=self._api_key,
            headers=merge_headers(base, self.headers),
            body=self.body(messages, tools),
            reader=lambda ctx, redactor: _Reader(redactor, ctx, limit),
            retry=self.retry,
            timeout=self.timeout,
        )

    def body(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        """The JSON body of one streaming request for `messages`, offering `tools`."""
        system, turns = anthropic_messages(messages)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": turns,
            "stream": True,
        }
        if system:
            body["system"] = [{"type": "text", "text": system}]
        if tools:
            body["tools"] = [anthropic_tool(t) for t in tools]
        if self.thinking_budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        if self.prompt_caching:
            mark_cache_breakpoints(body)
        return body


def mark_cache_breakpoints(body: dict[str, Any]) -> None:
    """Put ``cache_control`` on the system prompt, the last tool and the last turn's last block.

    The cache holds the prefix up to each breakpoint (tools, then system, then
    messages): the tools and system prompt rarely change, and the last turn's
    mark lets the next request read this whole conversation from the cache.
    Thinking blocks cannot carry the mark, so the last other block of the turn does.
    """
    if body.get("system"):
        body["system"][-1]["cache_control"] = dict(EPHEMERAL)
    if body.get("tools"):
        body["tools"][-1]["cache_control"] = dict(EPHEMERAL)
    turns = body.get("messages") or []
    if turns:
        for block in reversed(turns[-1]["content"]):
            if block.get("type") not in ("thinking", "redacted_thinking"):
                block["cache_control"] = dict(EPHEMERAL)
                break


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
        elif m.role is Role.NOTE:
            # agentrt's word on the conversation (what a stop did): a text block of the user
            # turn, after the tool_result blocks it speaks of, as the API wants them first.
            role = "user"
            blocks.append({"type": "text", "text": m.content})
        else:
            role = m.role.value
            # Signed thinking goes back first and unchanged; an unsigned block (its text
            # was scrubbed of a secret) cannot be sent back, so it is left out.
            blocks.extend(thinking_block(t) for t in m.thinking if t.sendable)
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


def thinking_block(block: ThinkingBlock) -> dict[str, Any]:
    """A kept thinking block as the API wants it back: ``thinking`` or ``redacted_thinking``."""
    if block.redacted:
        return {"type": "redacted_thinking", "data": block.redacted}
    return {"type": "thinking", "thinking": block.text, "signature": block.signature}


_ERROR_TYPES: dict[str, type[ProviderError]] = {
    "overloaded_error": ModelServerError,
    "api_error": ModelServerError,
    "rate_limit_error": ModelRateLimitError,
    "authentication_error": ModelAuthError,
    "permission_error": ModelAuthError,
    "not_found_error": ModelNotFoundError,
}


@mutable
class _Tool:
    id: str
    name: str
    arguments: list[str] = attrs.field(factory=list)
    #: Its content_block_stop arrived: the arguments are whole.
    stopped: bool = False


@mutable
class _Thinking:
    text: list[str] = attrs.field(factory=list)
    signature: str = ""
    redacted: str | None = None

    def block(self) -> ThinkingBlock:
        return ThinkingBlock("".join(self.text), self.signature or None, self.redacted)


@mutable(eq=False)
class _Reader:
    """One reply's events, accumulated."""

    redactor: Redactor
    ctx: ErrorContext
    #: The request's ``max_tokens``, named when the reply is cut there.
    limit: int | None = None
    done: bool = False
    _started: bool = False
    _stop_reason: str | None = None
    _text: list[str] = attrs.field(factory=list)
    #: Content block index -> position among this reply's tool calls.
    _tool_of_block: dict[int, int] = attrs.field(factory=dict)
    _tools: list[_Tool] = attrs.field(factory=list)
    #: Content block index -> thinking block (dicts keep the order they came in).
    _thinking: dict[int, _Thinking] = attrs.field(factory=dict)
    _input_tokens: int = 0
    _output_tokens: int = 0
    _cache_read: int = 0
    _cache_creation: int = 0

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
        elif kind == "content_block_stop":
            position = self._tool_of_block.get(data.get("index", -1))
            if position is not None:
                self._tools[position].stopped = True
        elif kind == "message_delta":
            self._count(data.get("usage"))
            delta = data.get("delta") or {}
            if isinstance(delta.get("stop_reason"), str):
                self._stop_reason = delta["stop_reason"]
        elif kind == "message_stop":
            self.done = True
        # ping and event types added later carry nothing we need.
        return []

    def _count(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        # input_tokens counts only the uncached part; cached prompt tokens are still
        # prompt tokens the model read, so the total has all three.
        inputs = [
            usage.get(k)
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        ]
        if any(isinstance(v, int) for v in inputs):
            self._input_tokens = sum(v for v in inputs if isinstance(v, int))
            self._cache_creation = _int(inputs[1])
            self._cache_read = _int(inputs[2])
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
        elif block.get("type") in ("thinking", "redacted_thinking"):
            if not isinstance(index, int):
                raise ModelStreamError(f"{_PROVIDER} started a thinking block without an index")
            thinking = self._thinking[index] = _Thinking()
            if block["type"] == "redacted_thinking":
                thinking.redacted = str(block.get("data") or "")
                return []
            thinking.signature = str(block.get("signature") or "")
            text = block.get("thinking")
            if isinstance(text, str) and text:
                thinking.text.append(text)
                return [ReasoningDelta(text)]
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
        elif delta.get("type") in ("thinking_delta", "signature_delta"):
            thinking = self._thinking.get(data.get("index", -1))
            if thinking is None:
                raise ModelStreamError(
                    f"{_PROVIDER} sent thinking for a block that is not a thinking block"
                )
            if delta["type"] == "signature_delta":
                # Sent whole just before the block stops; appended in case it comes in pieces.
                thinking.signature += str(delta.get("signature") or "")
                return []
            text = delta.get("thinking")
            if isinstance(text, str) and text:
                thinking.text.append(text)
                return [ReasoningDelta(text)]
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
        if self._stop_reason == "max_tokens":
            for tool in self._tools:
                if not tool.stopped or not _parses("".join(tool.arguments)):
                    raise cut_at_max_tokens(_PROVIDER, tool.name, self.limit)
        calls = tuple(
            ToolCall(t.id, t.name, parse_arguments("".join(t.arguments), t.name, _PROVIDER))
            for t in self._tools
        )
        usage = (
            Usage(self._input_tokens, self._output_tokens, self._cache_read, self._cache_creation)
            if self._started
            else None
        )
        thinking = tuple(t.block() for t in self._thinking.values())
        return ModelResponse("".join(self._text), calls, usage, thinking)


def _parses(text: str) -> bool:
    if not text.strip():
        return True
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0
