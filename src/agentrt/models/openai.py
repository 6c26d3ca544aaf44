"""A model behind an OpenAI-compatible chat completions API, streamed.

Serves the OpenAI API itself and the local servers that speak its dialect:
Ollama (``http://localhost:11434/v1``), vLLM, llama.cpp's server, LM Studio.
One request is ``POST {base_url}/chat/completions`` with ``stream: true``; the
reply is a server-sent event stream of ``chat.completion.chunk`` objects ending
in ``data: [DONE]``. Tool calls arrive as ``choices[0].delta.tool_calls[i]``
pieces keyed by ``index``: the id and name first, then the arguments JSON cut
anywhere. With ``stream_options.include_usage`` a last chunk carries ``usage``
(with ``prompt_tokens_details.cached_tokens`` where the server caches prompts).

Reasoning models served by DeepSeek, vLLM, Ollama or OpenRouter stream their
reasoning beside the answer, as ``delta.reasoning_content`` (or
``delta.reasoning``); it is delivered as `ReasoningDelta` and not sent back
on later turns (DeepSeek refuses it there).

`AzureOpenAIModel` speaks the same dialect to an Azure OpenAI deployment:
``POST {endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...``
with the key in an ``api-key`` header.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

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
from .messages import ToolCall
from .messages import ToolCallDelta
from .messages import ToolSpec
from .messages import Usage
from .streaming import DEFAULT_RETRY
from .streaming import DEFAULT_TIMEOUT
from .streaming import Api
from .streaming import ModelCall
from .streaming import ModelServerError
from .streaming import ModelStreamCutError
from .streaming import ModelStreamError
from .streaming import Redactor
from .streaming import SSEEvent
from .streaming import StreamedModel
from .streaming import cut_at_max_tokens
from .streaming import merge_headers
from .streaming import parse_arguments
from .streaming import parse_json_event
from .streaming import server_message

#: The hosted OpenAI API; point `base_url` elsewhere for a local server.
DEFAULT_OPENAI_URL = "https://api.openai.com/v1"
OPENAI_KEY_ENV = "OPENAI_API_KEY"
OPENAI_KEY_SECRET = "openai_api_key"
_PROVIDER = "OpenAI-compatible API"
_API = Api(_PROVIDER, DEFAULT_OPENAI_URL, "OpenAI API", OPENAI_KEY_ENV, OPENAI_KEY_SECRET)

#: The Azure OpenAI data-plane API version requests name, unless told another (the latest GA).
AZURE_API_VERSION = "2024-10-21"
AZURE_KEY_ENV = "AZURE_OPENAI_API_KEY"
AZURE_KEY_SECRET = "azure_openai_api_key"
_AZURE_PROVIDER = "Azure OpenAI"
_AZURE_API = Api(
    _AZURE_PROVIDER, "", "Azure OpenAI", AZURE_KEY_ENV, AZURE_KEY_SECRET, always_needs_key=True
)


@mutable(eq=False)
class OpenAIModel(StreamedModel):
    """A `Model` over an OpenAI-compatible ``/chat/completions`` endpoint.

    `api_key` may be None for local servers that need none; the hosted API
    without a key fails before sending anything. `headers` are sent with every
    request and override ours (OpenRouter's ``HTTP-Referer`` and ``X-Title``, a
    gateway's own key); a header named like a credential is scrubbed from error
    text like the key. `max_tokens` caps the reply (``max_completion_tokens``
    for the hosted API, ``max_tokens`` elsewhere; None leaves the server's
    default). `repr` never shows the key or the headers. Each `complete` uses
    its own connection, which a cancel closes at once.
    """

    model: str
    base_url: str = DEFAULT_OPENAI_URL
    _api_key: str | None = attrs.field(default=None, alias="api_key", repr=False)
    retry: RetryPolicy = DEFAULT_RETRY
    timeout: httpx.Timeout = DEFAULT_TIMEOUT
    #: Ask for the final usage chunk (``stream_options``); turn off for a server that rejects it.
    include_usage: bool = True
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    max_tokens: int | None = None

    def __attrs_post_init__(self) -> None:
        merge_headers({}, self.headers)  # a header that cannot be sent fails here, not mid-run
        _check_max_tokens(self.max_tokens)

    @property
    def name(self) -> str:
        """``"openai:<model>"``."""
        return f"openai:{self.model}"

    @property
    def url(self) -> str:
        """The chat completions endpoint requests go to."""
        return self.base_url.rstrip("/") + "/chat/completions"

    def call(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelCall:
        """The streaming request for `messages`, offering `tools`."""
        hosted = self.base_url.rstrip("/") == DEFAULT_OPENAI_URL
        return _chat_call(
            self,
            messages,
            tools,
            _API,
            name=self.model,
            base_url=self.base_url,
            auth={"authorization": f"Bearer {self._api_key}"} if self._api_key else {},
            api_key=self._api_key,
            body_model=self.model,
            max_tokens_field="max_completion_tokens" if hosted else "max_tokens",
        )


@mutable(eq=False)
class AzureOpenAIModel(StreamedModel):
    """A `Model` over an Azure OpenAI deployment's chat completions endpoint.

    `endpoint` is the resource's URL (``https://NAME.openai.azure.com``) and
    `deployment` the deployment's name, which picks the model. The key goes in
    the ``api-key`` header (Azure's, not ``Authorization``), and every request
    names `api_version`. Azure always needs a key; without one, `complete`
    fails before sending anything. `headers` and `max_tokens` work as for
    `OpenAIModel`.
    """

    endpoint: str
    deployment: str
    _api_key: str | None = attrs.field(default=None, alias="api_key", repr=False)
    api_version: str = AZURE_API_VERSION
    retry: RetryPolicy = DEFAULT_RETRY
    timeout: httpx.Timeout = DEFAULT_TIMEOUT
    include_usage: bool = True
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    max_tokens: int | None = None

    def __attrs_post_init__(self) -> None:
        merge_headers({}, self.headers)
        _check_max_tokens(self.max_tokens)
        if not self.deployment.strip():
            raise ValueError("an Azure OpenAI model needs the deployment's name")

    @property
    def name(self) -> str:
        """``"azure:<deployment>"``."""
        return f"azure:{self.deployment}"

    @property
    def url(self) -> str:
        """The deployment's chat completions endpoint, with the ``api-version`` query."""
        base = self.endpoint.rstrip("/")
        deployment = quote(self.deployment, safe="")
        version = quote(self.api_version, safe="")
        return f"{base}/openai/deployments/{deployment}/chat/completions?api-version={version}"

    def call(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelCall:
        """The streaming request for `messages`, offering `tools`, as `OpenAIModel.call` makes it."""
        return _chat_call(
            self,
            messages,
            tools,
            _AZURE_API,
            name=self.deployment,
            base_url=self.endpoint,
            auth={"api-key": self._api_key} if self._api_key else {},
            api_key=self._api_key,
            body_model=None,  # the deployment names the model
            max_tokens_field="max_completion_tokens",
        )


def _chat_call(
    settings: OpenAIModel | AzureOpenAIModel,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
    api: Api,
    *,
    name: str,
    base_url: str,
    auth: Mapping[str, str],
    api_key: str | None,
    body_model: str | None,
    max_tokens_field: str,
) -> ModelCall:
    """The chat completions request `settings` makes for `messages`, offering `tools`."""
    body = chat_body(
        messages,
        tools,
        model=body_model,
        include_usage=settings.include_usage,
        max_tokens=settings.max_tokens,
        max_tokens_field=max_tokens_field,
    )
    limit = settings.max_tokens
    return ModelCall(
        api,
        model=name,
        base_url=base_url,
        url=settings.url,
        api_key=api_key,
        headers=merge_headers({"accept": "text/event-stream", **auth}, settings.headers),
        body=body,
        reader=lambda ctx, redactor: _Reader(redactor, api.provider, limit),
        retry=settings.retry,
        timeout=settings.timeout,
    )


def _check_max_tokens(value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or value < 1):
        raise ValueError(f"max_tokens must be a positive integer, not {value!r}")


def chat_body(
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
    *,
    model: str | None,
    include_usage: bool,
    max_tokens: int | None,
    max_tokens_field: str,
) -> dict[str, Any]:
    """The JSON body of one streaming chat completions request."""
    body: dict[str, Any] = {"messages": openai_messages(messages), "stream": True}
    if model is not None:
        body = {"model": model, **body}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    if tools:
        body["tools"] = [openai_tool(t) for t in tools]
    if max_tokens is not None:
        body[max_tokens_field] = max_tokens
    return body


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
        elif m.role is Role.NOTE:
            # agentrt's word on the conversation (what a stop did), where it happened: after
            # the tool results it speaks of, as the next user turn. Not a system message: the
            # API takes instructions there, and this is not one.
            out.append({"role": "user", "content": m.content})
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


@mutable
class _Call:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = attrs.field(factory=list)


@mutable(eq=False)
class _Reader:
    """One reply's chunks, accumulated."""

    redactor: Redactor
    provider: str = _PROVIDER
    #: The ``max_tokens`` the request asked for, named when the reply is cut there.
    limit: int | None = None
    done: bool = False
    _finish_reason: str | None = None
    _text: list[str] = attrs.field(factory=list)
    _calls: dict[int, _Call] = attrs.field(factory=dict)
    _usage: Usage | None = None

    def handle(self, event: SSEEvent) -> list[ModelDelta]:
        # Every chunk but the last is a JSON object: only text not starting as one is looked at.
        if not event.data.startswith("{") and event.data.strip() == "[DONE]":
            self.done = True
            return []
        data = parse_json_event(event, self.provider)
        error = data.get("error")
        if error is not None and not data.get("choices"):
            # Servers report failures after the 200 as a chunk holding "error".
            said = server_message(json.dumps({"error": error}).encode(), self.redactor)
            raise ModelServerError(f"{self.provider} failed mid-reply: {said}")
        usage = data.get("usage")
        if isinstance(usage, dict):
            details = usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            if cached is None:
                cached = usage.get("prompt_cache_hit_tokens")  # DeepSeek's name for it
            out = usage.get("completion_tokens_details")
            reasoning = out.get("reasoning_tokens") if isinstance(out, dict) else None
            self._usage = Usage(
                input_tokens=_int(usage.get("prompt_tokens")),
                output_tokens=_int(usage.get("completion_tokens")),
                cache_read_tokens=_int(cached),
                reasoning_tokens=_int(reasoning),
            )
        deltas: list[ModelDelta] = []
        for choice in data.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            # DeepSeek and vLLM say reasoning_content; Ollama, OpenRouter and newer vLLM reasoning.
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                deltas.append(ReasoningDelta(reasoning))
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
            raise ModelStreamError(f"{self.provider} sent a tool call piece that is not an object")
        index = piece.get("index", position)
        if not isinstance(index, int):
            raise ModelStreamError(f"{self.provider} sent a tool call with a non-integer index")
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
            raise ModelStreamCutError(
                f"{self.provider} ended the stream before the reply was complete"
            )
        if self._finish_reason == "length" and self._calls:
            # Cut at the output limit while writing calls: the last one's arguments are
            # incomplete, even where the text so far happens to parse.
            last = self._calls[max(self._calls)]
            raise cut_at_max_tokens(self.provider, last.name or "?", self.limit)
        calls = []
        for index in sorted(self._calls):
            call = self._calls[index]
            if not call.name:
                raise ModelStreamError(
                    f"{self.provider} streamed tool call #{index} without a name"
                )
            calls.append(
                ToolCall(
                    id=call.id or f"call_{index}",
                    name=call.name,
                    arguments=parse_arguments("".join(call.arguments), call.name, self.provider),
                )
            )
        return ModelResponse("".join(self._text), tuple(calls), self._usage)


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0
