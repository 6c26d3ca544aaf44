"""A model behind an OpenAI-compatible chat completions API, streamed.

Serves the OpenAI API itself and the local servers that speak its dialect:
Ollama (``http://localhost:11434/v1``), vLLM, llama.cpp's server, LM Studio.
One request is ``POST {base_url}/chat/completions`` with ``stream: true``; the
reply is a server-sent event stream of ``chat.completion.chunk`` objects ending
in ``data: [DONE]``. Tool calls arrive as ``choices[0].delta.tool_calls[i]``
pieces keyed by ``index``: the id and name first, then the arguments JSON cut
anywhere. With ``stream_options.include_usage`` a last chunk carries ``usage``.
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
    ModelServerError,
    ModelStreamCutError,
    ModelStreamError,
    Redactor,
    SSEEvent,
    parse_arguments,
    parse_json_event,
    server_message,
    stream_completion,
)

#: The hosted OpenAI API; point `base_url` elsewhere for a local server.
DEFAULT_OPENAI_URL = "https://api.openai.com/v1"
OPENAI_KEY_ENV = "OPENAI_API_KEY"
OPENAI_KEY_SECRET = "openai_api_key"
_PROVIDER = "OpenAI-compatible API"
_API = Api(_PROVIDER, DEFAULT_OPENAI_URL, "OpenAI API", OPENAI_KEY_ENV, OPENAI_KEY_SECRET)


@attrs.define(eq=False)
class OpenAIModel:
    """A `Model` over an OpenAI-compatible ``/chat/completions`` endpoint.

    `api_key` may be None for local servers that need none; the hosted API
    without a key fails before sending anything. `repr` never shows the key.
    Each `complete` uses its own connection, which a cancel closes at once.
    """

    model: str
    base_url: str = DEFAULT_OPENAI_URL
    _api_key: str | None = attrs.field(default=None, alias="api_key", repr=False)
    retry: RetryPolicy = DEFAULT_RETRY
    timeout: httpx.Timeout = DEFAULT_TIMEOUT
    #: Ask for the final usage chunk (``stream_options``); turn off for a server that rejects it.
    include_usage: bool = True

    @property
    def name(self) -> str:
        """``"openai:<model>"``."""
        return f"openai:{self.model}"

    @property
    def url(self) -> str:
        """The chat completions endpoint requests go to."""
        return self.base_url.rstrip("/") + "/chat/completions"

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        on_delta: OnDelta,
    ) -> ModelResponse:
        """Stream one response, delivering text and tool-call deltas as they arrive."""
        headers = {"accept": "text/event-stream"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        body: dict[str, Any] = {
            "model": self.model,
            "messages": openai_messages(messages),
            "stream": True,
        }
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        if tools:
            body["tools"] = [openai_tool(t) for t in tools]
        return await stream_completion(
            _API,
            model=self.model,
            base_url=self.base_url,
            url=self.url,
            api_key=self._api_key,
            headers=headers,
            body=body,
            reader=lambda ctx, redactor: _Reader(redactor),
            retry=self.retry,
            http_timeout=self.timeout,
            on_delta=on_delta,
        )


def openai_tool(tool: ToolSpec) -> dict[str, Any]:
    """A tool in the ``tools`` list of a chat completions request."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Our transcript in the chat completions ``messages`` form."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role is Role.TOOL:
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        elif m.role is Role.ASSISTANT and m.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    # The API wants null, not "", next to tool calls without text.
                    "content": m.content or None,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                        }
                        for c in m.tool_calls
                    ],
                }
            )
        else:
            out.append({"role": m.role.value, "content": m.content})
    return out


@attrs.define
class _Call:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = attrs.field(factory=list)


@attrs.define(eq=False)
class _Reader:
    """One reply's chunks, accumulated."""

    redactor: Redactor
    done: bool = False
    _finish_reason: str | None = None
    _text: list[str] = attrs.field(factory=list)
    _calls: dict[int, _Call] = attrs.field(factory=dict)
    _usage: Usage | None = None

    def handle(self, event: SSEEvent) -> list[ModelDelta]:
        if event.data.strip() == "[DONE]":
            self.done = True
            return []
        data = parse_json_event(event, _PROVIDER)
        error = data.get("error")
        if error is not None and not data.get("choices"):
            # Servers report failures after the 200 as a chunk holding "error".
            said = server_message(json.dumps({"error": error}).encode(), self.redactor)
            raise ModelServerError(f"{_PROVIDER} failed mid-reply: {said}")
        usage = data.get("usage")
        if isinstance(usage, dict):
            self._usage = Usage(
                input_tokens=_int(usage.get("prompt_tokens")),
                output_tokens=_int(usage.get("completion_tokens")),
            )
        deltas: list[ModelDelta] = []
        for choice in data.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._text.append(content)
                deltas.append(TextDelta(content))
            for position, piece in enumerate(delta.get("tool_calls") or ()):
                deltas.append(self._tool_piece(position, piece))
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
        return deltas

    def _tool_piece(self, position: int, piece: Any) -> ToolCallDelta:
        if not isinstance(piece, dict):
            raise ModelStreamError(f"{_PROVIDER} sent a tool call piece that is not an object")
        index = piece.get("index", position)
        if not isinstance(index, int):
            raise ModelStreamError(f"{_PROVIDER} sent a tool call with a non-integer index")
        function = piece.get("function") or {}
        call = self._calls.setdefault(index, _Call())
        new_id = new_name = None
        if isinstance(piece.get("id"), str) and piece["id"] and call.id is None:
            call.id = new_id = piece["id"]
        if isinstance(function.get("name"), str) and function["name"] and call.name is None:
            call.name = new_name = function["name"]
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            # Some servers send the arguments as an object rather than JSON text.
            arguments = json.dumps(arguments) if isinstance(arguments, dict) else ""
        call.arguments.append(arguments)
        return ToolCallDelta(index=index, id=new_id, name=new_name, arguments=arguments)

    def finish(self) -> ModelResponse:
        if not self.done and self._finish_reason is None:
            raise ModelStreamCutError(f"{_PROVIDER} ended the stream before the reply was complete")
        calls = []
        for index in sorted(self._calls):
            call = self._calls[index]
            if not call.name:
                raise ModelStreamError(f"{_PROVIDER} streamed tool call #{index} without a name")
            calls.append(
                ToolCall(
                    id=call.id or f"call_{index}",
                    name=call.name,
                    arguments=parse_arguments("".join(call.arguments), call.name, _PROVIDER),
                )
            )
        return ModelResponse("".join(self._text), tuple(calls), self._usage)


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0
