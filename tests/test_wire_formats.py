"""Our fake model servers speak the APIs' real wire formats: checked with the official SDKs.

Every event the fakes in `tests/fakes/llm_server.py` build is validated with
the ``openai`` and ``anthropic`` packages' own pydantic models
(`ChatCompletionChunk`, `RawMessageStreamEvent`), with no field the model does
not know (a misspelt field would otherwise pass silently: the SDK models allow
extras). Then each SDK's own client reads a whole fake stream over HTTP and
assembles it, as it would a real reply; and the requests our providers send
are validated with the SDKs' request types.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from collections.abc import Sequence
from typing import Any

import anthropic
import openai
import pydantic
import trio
from anthropic.types import Message as AnthropicMessage
from anthropic.types import RawMessageStreamEvent
from anthropic.types.message_create_params import MessageCreateParamsStreaming
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming

from agentrt import Message
from agentrt import ThinkingBlock
from agentrt import ToolCall
from agentrt import ToolSpec
from agentrt.models.openai import chat_body
from agentrt.models.providers import AnthropicModel
from agentrt.models.streaming import SSEDecoder
from agentrt.models.streaming import SSEEvent

from .fakes.llm_server import OA_DONE
from .fakes.llm_server import LLMServer
from .fakes.llm_server import an_end
from .fakes.llm_server import an_error
from .fakes.llm_server import an_event
from .fakes.llm_server import an_redacted_thinking_block
from .fakes.llm_server import an_start
from .fakes.llm_server import an_text_block
from .fakes.llm_server import an_thinking_block
from .fakes.llm_server import an_tool_block
from .fakes.llm_server import oa_finish
from .fakes.llm_server import oa_reasoning
from .fakes.llm_server import oa_text
from .fakes.llm_server import oa_tool
from .fakes.llm_server import oa_usage
from .fakes.llm_server import sse

SIGNATURE = "EqoBCkgIARABGAIiQL2UoU0b1OHYi+sig=="
TOOLS = [ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {}}})]

OPENAI_STREAM = [
    oa_reasoning("Thinking about it."),
    oa_text("Let me "),
    oa_text("read it."),
    oa_tool(0, id="call_1", name="read_file"),
    oa_tool(0, arguments='{"pa'),
    oa_tool(0, arguments='th": "notes.txt"}'),
    oa_finish("tool_calls"),
    oa_usage(1500, 12, cached=1024),
    OA_DONE,
]

ANTHROPIC_STREAM = [
    an_start(5, cache_read=1000, cache_creation=200),
    an_event("ping"),
    *an_thinking_block(0, ["I should ", "read it."], SIGNATURE),
    *an_redacted_thinking_block(1, "ENCRYPTED=="),
    *an_text_block(2, ["Reading ", "now."]),
    *an_tool_block(3, "toolu_1", "read_file", ['{"pa', 'th": "notes.txt"}']),
    *an_end("tool_use", 30),
]


def events(pieces: Iterable[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    decoder.feed(b"".join(pieces))
    decoder.feed(b"")
    out = []
    while (event := decoder.next_event()) is not None:
        out.append(event)
    return out


def unknown_fields(value: Any, path: str = "$") -> list[str]:
    """Paths of fields the SDK model did not declare (its `model_extra`), anywhere inside."""
    found: list[str] = []
    if isinstance(value, pydantic.BaseModel):
        found += [f"{path}.{name}" for name in value.model_extra or {}]
        for name in type(value).model_fields:
            found += unknown_fields(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, list | tuple):
        for n, item in enumerate(value):
            found += unknown_fields(item, f"{path}[{n}]")
    return found


def test_openai_fake_chunks_are_chat_completion_chunks() -> None:
    chunks = [e for e in events(OPENAI_STREAM) if e.data != "[DONE]"]
    assert len(chunks) == len(OPENAI_STREAM) - 1
    parsed = [ChatCompletionChunk.model_validate(json.loads(e.data)) for e in chunks]
    # reasoning_content is the one field not in OpenAI's own schema: DeepSeek's and vLLM's.
    assert [unknown_fields(c) for c in parsed] == [
        ["$.choices[0].delta.reasoning_content"],
        *[[] for _ in parsed[1:]],
    ]
    usage = parsed[-1].usage
    assert usage is not None
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 1024


def test_anthropic_fake_events_are_raw_message_stream_events() -> None:
    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)
    kinds = []
    for event in events(ANTHROPIC_STREAM):
        data = json.loads(event.data)
        if data["type"] == "ping":  # not in the union: the SDK skips pings before parsing
            continue
        parsed = adapter.validate_python(data)
        assert parsed.type == event.event  # the event: line names the data's type
        assert unknown_fields(parsed) == [], data
        kinds.append(parsed.type)
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    error = anthropic.types.ErrorResponse.model_validate(an_error("overloaded_error", "busy"))
    assert error.error.type == "overloaded_error"


async def test_the_openai_client_assembles_a_fake_stream(llm_server: LLMServer) -> None:
    llm_server.script(sse(OPENAI_STREAM))
    client = openai.OpenAI(base_url=llm_server.base_url + "/v1", api_key="sk-test", max_retries=0)

    def read() -> list[ChatCompletionChunk]:
        stream = client.chat.completions.create(
            model="test-model",
            messages=[{"role": "user", "content": "read notes.txt"}],
            stream=True,
        )
        return list(stream)

    with trio.fail_after(10):
        chunks = await trio.to_thread.run_sync(read)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    arguments = "".join(
        call.function.arguments or ""
        for c in chunks
        if c.choices
        for call in c.choices[0].delta.tool_calls or []
        if call.function is not None
    )
    assert text == "Let me read it."
    assert json.loads(arguments) == {"path": "notes.txt"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 12


async def test_the_anthropic_client_assembles_a_fake_stream(llm_server: LLMServer) -> None:
    llm_server.script(sse(ANTHROPIC_STREAM))
    client = anthropic.Anthropic(base_url=llm_server.base_url, api_key="sk-ant-test", max_retries=0)

    def read() -> AnthropicMessage:
        with client.messages.stream(
            model="test-model",
            max_tokens=4000,
            messages=[{"role": "user", "content": "read notes.txt"}],
        ) as stream:
            return stream.get_final_message()

    with trio.fail_after(10):
        final = await trio.to_thread.run_sync(read)
    assert [b.type for b in final.content] == [
        "thinking",
        "redacted_thinking",
        "text",
        "tool_use",
    ]
    thinking, redacted, text, tool = final.content
    assert isinstance(thinking, anthropic.types.ThinkingBlock)
    assert (thinking.thinking, thinking.signature) == ("I should read it.", SIGNATURE)
    assert isinstance(redacted, anthropic.types.RedactedThinkingBlock)
    assert redacted.data == "ENCRYPTED=="
    assert isinstance(text, anthropic.types.TextBlock)
    assert text.text == "Reading now."
    assert isinstance(tool, anthropic.types.ToolUseBlock)
    assert tool.input == {"path": "notes.txt"}
    assert final.stop_reason == "tool_use"
    assert final.usage.cache_read_input_tokens == 1000
    assert final.usage.cache_creation_input_tokens == 200


def transcript() -> Sequence[Message]:
    call = ToolCall("toolu_1", "read_file", {"path": "notes.txt"})
    thinking = (ThinkingBlock("", None, "ENCRYPTED=="), ThinkingBlock("I should.", SIGNATURE))
    return [
        Message.system("be brief"),
        Message.user("read notes.txt"),
        Message(Message.assistant("Reading.", [call]).role, "Reading.", (call,), thinking=thinking),
        Message.tool_result(call, "hello"),
    ]


def drained(value: Any) -> Any:
    """A validated request with its lazily validated iterables read (which validates them)."""
    if isinstance(value, dict):
        return {k: drained(v) for k, v in value.items()}
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    return [drained(item) for item in value]


def test_our_anthropic_request_is_a_valid_message_create_params() -> None:
    model = AnthropicModel("claude-test", max_tokens=4096, thinking_budget=2048)
    body = json.loads(json.dumps(model.body(transcript(), TOOLS)))
    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(MessageCreateParamsStreaming)
    checked = drained(adapter.validate_python(body, strict=True))
    # Typed dicts drop keys they do not declare: equal means every key is one the API knows.
    assert checked == body
    assert [b["type"] for b in checked["messages"][1]["content"]] == [
        "redacted_thinking",
        "thinking",
        "text",
        "tool_use",
    ]
    assert checked["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_our_openai_request_is_a_valid_completion_create_params() -> None:
    body = chat_body(
        transcript(),
        TOOLS,
        model="gpt-test",
        include_usage=True,
        max_tokens=100,
        max_tokens_field="max_completion_tokens",
    )
    body = json.loads(json.dumps(body))
    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(CompletionCreateParamsStreaming)
    checked = drained(adapter.validate_python(body, strict=True))
    assert checked == body
    assert checked["max_completion_tokens"] == 100
