"""The Anthropic provider against a scripted server on loopback."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from agentrt import Message
from agentrt import ReasoningDelta
from agentrt import TextDelta
from agentrt import ThinkingBlock
from agentrt import ToolCall
from agentrt import ToolCallDelta
from agentrt import ToolSpec
from agentrt.models.anthropic import anthropic_messages
from agentrt.models.messages import Usage
from agentrt.models.providers import AnthropicModel
from agentrt.models.providers import ModelRateLimitError
from agentrt.models.providers import ModelRequestError
from agentrt.models.providers import ModelServerError
from agentrt.models.providers import ModelStreamCutError
from agentrt.models.providers import ModelStreamError
from agentrt.models.providers import RetryPolicy

from .conftest import Collect
from .fakes.llm_server import LLMServer
from .fakes.llm_server import an_end
from .fakes.llm_server import an_error
from .fakes.llm_server import an_event
from .fakes.llm_server import an_redacted_thinking_block
from .fakes.llm_server import an_start
from .fakes.llm_server import an_text_block
from .fakes.llm_server import an_thinking_block
from .fakes.llm_server import an_tool_block
from .fakes.llm_server import json_error
from .fakes.llm_server import sse

CANARY = "sk-ant-canary-91c4e7d2a6b8f0e3"
FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.01)
TOOLS = [ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {}}})]


def model(llm_server: LLMServer, **kw: Any) -> AnthropicModel:
    kw.setdefault("api_key", CANARY)
    kw.setdefault("retry", FAST)
    return AnthropicModel("claude-test", llm_server.base_url, **kw)


def reply_text(*pieces: str) -> list[bytes]:
    return [an_start(7), *an_text_block(0, pieces), *an_end("end_turn", 4)]


async def test_request_has_the_wire_shape(llm_server: LLMServer) -> None:
    llm_server.script(sse(reply_text("ok")))
    a = ToolCall("toolu_a", "read_file", {"path": "a"})
    b = ToolCall("toolu_b", "read_file", {"path": "b"})
    transcript = [
        Message.system("be brief"),
        Message.user("read a and b"),
        Message.assistant("Reading.", [a, b]),
        Message.tool_result(a, "A"),
        Message.tool_result(b, "B"),
    ]
    with trio.fail_after(5):
        await model(llm_server, max_tokens=123, prompt_caching=False).complete(
            transcript, TOOLS, Collect()
        )
    [request] = llm_server.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == CANARY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    body = request.json()
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 123
    assert body["stream"] is True
    assert body["system"] == [{"type": "text", "text": "be brief"}]
    assert "thinking" not in body
    assert body["tools"] == [
        {
            "name": "read_file",
            "description": "Read a file",
            "input_schema": {"type": "object", "properties": {"path": {}}},
        }
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "read a and b"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_b", "name": "read_file", "input": {"path": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "B"},
            ],
        },
    ]


def test_empty_assistant_text_makes_no_empty_block() -> None:
    call = ToolCall("t", "read_file", {})
    system, turns = anthropic_messages([Message.user("x"), Message.assistant("", [call])])
    assert system == ""
    assert turns[1]["content"] == [
        {"type": "tool_use", "id": "t", "name": "read_file", "input": {}}
    ]


async def test_tool_use_blocks_split_mid_json(llm_server: LLMServer) -> None:
    llm_server.script(
        sse(
            [
                an_start(30),
                *an_text_block(0, ["Let me ", "look."]),
                *an_tool_block(1, "toolu_a", "read_file", ["", '{"pa', 'th": "a', '.txt"}']),
                *an_tool_block(2, "toolu_b", "read_file", ['{"path":', ' "b"}']),
                *an_end("tool_use", 50),
            ],
            split=7,
        )
    )
    got = Collect()
    with trio.fail_after(5):
        response = await model(llm_server).complete([Message.user("go")], TOOLS, got)
    assert response.text == "Let me look."
    assert response.tool_calls == (
        ToolCall("toolu_a", "read_file", {"path": "a.txt"}),
        ToolCall("toolu_b", "read_file", {"path": "b"}),
    )
    assert response.usage == Usage(30, 50)
    tool_deltas = [d for d in got.deltas if isinstance(d, ToolCallDelta)]
    assert tool_deltas[0] == ToolCallDelta(index=0, id="toolu_a", name="read_file")
    assert {d.index for d in tool_deltas} == {0, 1}
    assert "".join(d.arguments for d in tool_deltas if d.index == 1) == '{"path": "b"}'


async def test_tool_use_without_input_has_empty_arguments(llm_server: LLMServer) -> None:
    llm_server.script(
        sse([an_start(), *an_tool_block(0, "toolu_x", "read_file", []), *an_end("tool_use")])
    )
    with trio.fail_after(5):
        response = await model(llm_server).complete([Message.user("go")], TOOLS, Collect())
    assert response.tool_calls == (ToolCall("toolu_x", "read_file", {}),)


async def test_overloaded_event_before_any_delta_is_retried(llm_server: LLMServer) -> None:
    llm_server.script(
        sse(
            [
                an_start(),
                an_event("error", error=an_error("overloaded_error", "Overloaded")["error"]),
            ]
        ),
        sse(reply_text("ok")),
    )
    with trio.fail_after(5):
        response = await model(llm_server).complete([Message.user("hi")], [], Collect())
    assert response.text == "ok"
    assert len(llm_server.requests) == 2


async def test_overloaded_event_after_a_delta_is_raised(llm_server: LLMServer) -> None:
    overloaded = an_event("error", error=an_error("overloaded_error", "Overloaded")["error"])
    llm_server.script(
        sse([an_start(), *an_text_block(0, ["half"])[:2], overloaded]),
        sse(reply_text("again")),
    )
    got = Collect()
    with trio.fail_after(5), pytest.raises(ModelServerError, match=r"overloaded_error.*Overloaded"):
        await model(llm_server).complete([Message.user("hi")], [], got)
    assert got.deltas == [TextDelta("half")]
    assert len(llm_server.requests) == 1


async def test_529_overloaded_is_retried_then_gives_up(llm_server: LLMServer) -> None:
    llm_server.script(*[json_error(529, an_error("overloaded_error", "Overloaded"))] * 3)
    with trio.fail_after(5), pytest.raises(ModelServerError, match=r"HTTP 529.*Overloaded"):
        await model(llm_server).complete([Message.user("hi")], [], Collect())
    assert len(llm_server.requests) == 3


async def test_rate_limit_event_is_a_rate_limit_error(llm_server: LLMServer) -> None:
    event = an_event("error", error=an_error("rate_limit_error", "too fast")["error"])
    llm_server.script(*[sse([event])] * 3)
    with trio.fail_after(5), pytest.raises(ModelRateLimitError, match="too fast"):
        await model(llm_server).complete([Message.user("hi")], [], Collect())


async def test_400_is_a_request_error_and_not_retried(llm_server: LLMServer) -> None:
    llm_server.script(json_error(400, an_error("invalid_request_error", "max_tokens: too big")))
    with trio.fail_after(5), pytest.raises(ModelRequestError, match="max_tokens: too big"):
        await model(llm_server).complete([Message.user("hi")], [], Collect())
    assert len(llm_server.requests) == 1


async def test_stream_ending_before_message_stop_is_cut(llm_server: LLMServer) -> None:
    # A clean end of the HTTP body, but the reply itself never finished.
    llm_server.script(sse([an_start(), *an_text_block(0, ["part"])]))
    with trio.fail_after(5), pytest.raises(ModelStreamCutError, match="before message_stop"):
        await model(llm_server).complete([Message.user("hi")], [], Collect())
    assert len(llm_server.requests) == 1, "never retried once a delta was delivered"


async def test_malformed_event_is_a_stream_error(llm_server: LLMServer) -> None:
    llm_server.script(sse([an_start(), b"event: content_block_delta\ndata: {oops\n\n"]))
    with trio.fail_after(5), pytest.raises(ModelStreamError, match="not JSON"):
        await model(llm_server).complete([Message.user("hi")], [], Collect())


async def test_base_url_with_v1_suffix_is_accepted() -> None:
    m = AnthropicModel("c", "http://127.0.0.1:1/v1/", api_key="k")
    assert m.url == "http://127.0.0.1:1/v1/messages"
    assert CANARY not in repr(AnthropicModel("c", api_key=CANARY))
    assert m.name == "anthropic:c"


# --------------------------------------------------------------------------- extended thinking

SIGNATURE = "EqoBCkgIARABGAIiQL2UoU0b1OHYi+sig=="


async def test_thinking_streams_as_reasoning_and_goes_back_signed_on_the_next_turn(
    llm_server: LLMServer,
) -> None:
    llm_server.script(
        sse(
            [
                an_start(20),
                *an_thinking_block(0, ["I should read ", "the file."], SIGNATURE),
                *an_text_block(1, ["Reading."]),
                *an_tool_block(2, "toolu_1", "read_file", ['{"path": "a"}']),
                *an_end("tool_use", 30),
            ]
        ),
        sse(reply_text("It says A.")),
    )
    thinker = model(llm_server, max_tokens=4000, thinking_budget=2048)
    got = Collect()
    with trio.fail_after(5):
        first = await thinker.complete([Message.user("read a")], TOOLS, got)
        call = first.tool_calls[0]
        transcript = [Message.user("read a"), first.as_message(), Message.tool_result(call, "A")]
        await thinker.complete(transcript, TOOLS, Collect())
    assert got.deltas[:2] == [ReasoningDelta("I should read "), ReasoningDelta("the file.")]
    assert TextDelta("Reading.") in got.deltas
    assert first.text == "Reading."
    assert first.thinking == (ThinkingBlock("I should read the file.", SIGNATURE),)
    assert llm_server.requests[0].json()["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    # The thinking block goes back first in its assistant turn, whole and signed.
    assistant = llm_server.requests[1].json()["messages"][1]
    assert assistant["role"] == "assistant"
    assert [b["type"] for b in assistant["content"]] == ["thinking", "text", "tool_use"]
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "I should read the file.",
        "signature": SIGNATURE,
    }


async def test_redacted_thinking_is_kept_and_sent_back_as_it_came(llm_server: LLMServer) -> None:
    llm_server.script(
        sse(
            [
                an_start(),
                *an_redacted_thinking_block(0, "ENCRYPTED-blob=="),
                *an_thinking_block(1, ["visible"], SIGNATURE),
                *an_tool_block(2, "toolu_1", "read_file", ["{}"]),
                *an_end("tool_use"),
            ]
        )
    )
    with trio.fail_after(5):
        response = await model(llm_server, thinking_budget=1024).complete(
            [Message.user("x")], TOOLS, Collect()
        )
    assert response.thinking == (
        ThinkingBlock("", None, "ENCRYPTED-blob=="),
        ThinkingBlock("visible", SIGNATURE),
    )
    _, turns = anthropic_messages([Message.user("x"), response.as_message()])
    assert turns[1]["content"][:2] == [
        {"type": "redacted_thinking", "data": "ENCRYPTED-blob=="},
        {"type": "thinking", "thinking": "visible", "signature": SIGNATURE},
    ]


def test_a_thinking_block_that_lost_its_signature_is_not_sent_back() -> None:
    call = ToolCall("t", "read_file", {})
    scrubbed = ThinkingBlock("the key is hunter22", SIGNATURE).scrubbed(
        lambda text: text.replace("hunter22", "[secret K]")
    )
    assert scrubbed == ThinkingBlock("the key is [secret K]", None)
    message = Message.assistant("", [call])
    message = Message(message.role, "", message.tool_calls, thinking=(scrubbed,))
    _, turns = anthropic_messages([Message.user("x"), message])
    assert turns[1]["content"] == [
        {"type": "tool_use", "id": "t", "name": "read_file", "input": {}}
    ]


@pytest.mark.parametrize("budget", [512, 4096, 9000])
def test_a_thinking_budget_out_of_range_is_refused(budget: int) -> None:
    with pytest.raises(ValueError, match="thinking_budget must be at least 1024 and less than"):
        AnthropicModel("m", max_tokens=4096, thinking_budget=budget)


# --------------------------------------------------------------------------- prompt caching


async def test_prompt_caching_marks_system_tools_and_the_last_turn(llm_server: LLMServer) -> None:
    llm_server.script(sse(reply_text("ok")))
    a = ToolCall("toolu_a", "read_file", {"path": "a"})
    transcript = [
        Message.system("be brief"),
        Message.user("read a"),
        Message.assistant("", [a]),
        Message.tool_result(a, "A"),
    ]
    with trio.fail_after(5):
        await model(llm_server).complete(transcript, [*TOOLS, *TOOLS], Collect())
    body = llm_server.requests[0].json()
    ephemeral = {"type": "ephemeral"}
    assert body["system"] == [{"type": "text", "text": "be brief", "cache_control": ephemeral}]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][-1]["cache_control"] == ephemeral
    assert body["messages"][-1]["content"][-1] == {
        "type": "tool_result",
        "tool_use_id": "toolu_a",
        "content": "A",
        "cache_control": ephemeral,
    }
    # Three breakpoints, well within the API's four.
    assert llm_server.requests[0].body.decode().count('"cache_control"') == 3


async def test_cache_read_and_creation_tokens_are_reported_apart(llm_server: LLMServer) -> None:
    llm_server.script(
        sse(
            [an_start(5, cache_read=1000, cache_creation=200), *an_text_block(0, ["hi"]), *an_end()]
        )
    )
    with trio.fail_after(5):
        response = await model(llm_server).complete([Message.user("x")], [], Collect())
    assert response.usage == Usage(
        input_tokens=1205, output_tokens=5, cache_read_tokens=1000, cache_creation_tokens=200
    )


# --------------------------------------------------------------------------- max_tokens


async def test_a_max_tokens_stop_in_text_after_whole_calls_keeps_the_reply(
    llm_server: LLMServer,
) -> None:
    llm_server.script(
        sse(
            [
                an_start(),
                *an_tool_block(0, "toolu_1", "read_file", ['{"path": "a"}']),
                *an_text_block(1, ["and then"]),
                *an_end("max_tokens", 64),
            ]
        )
    )
    with trio.fail_after(5):
        response = await model(llm_server).complete([Message.user("w")], TOOLS, Collect())
    assert response.tool_calls == (ToolCall("toolu_1", "read_file", {"path": "a"}),)


# --------------------------------------------------------------------------- headers


async def test_custom_headers_are_sent_with_every_request(llm_server: LLMServer) -> None:
    llm_server.script(sse(reply_text("ok")))
    headers = {"anthropic-beta": "interleaved-thinking-2025-05-14", "X-Gateway": "edge-1"}
    with trio.fail_after(5):
        await model(llm_server, headers=headers).complete([Message.user("x")], [], Collect())
    [request] = llm_server.requests
    assert request.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert request.headers["x-gateway"] == "edge-1"
    assert request.headers["x-api-key"] == CANARY
