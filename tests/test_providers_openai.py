"""The OpenAI-compatible provider against a scripted server on loopback."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest
import trio

from agentrt import Message
from agentrt import ReasoningDelta
from agentrt import TextDelta
from agentrt import ToolCall
from agentrt import ToolCallDelta
from agentrt import ToolSpec
from agentrt.models.messages import ModelDelta
from agentrt.models.messages import Usage
from agentrt.models.providers import AzureOpenAIModel
from agentrt.models.providers import ModelAuthError
from agentrt.models.providers import ModelConnectError
from agentrt.models.providers import ModelRateLimitError
from agentrt.models.providers import ModelServerError
from agentrt.models.providers import ModelStreamCutError
from agentrt.models.providers import ModelStreamError
from agentrt.models.providers import ModelTimeoutError
from agentrt.models.providers import OpenAIModel
from agentrt.models.providers import RetryPolicy

from .conftest import Collect
from .fakes.llm_server import OA_DONE
from .fakes.llm_server import Exchange
from .fakes.llm_server import LLMServer
from .fakes.llm_server import cut
from .fakes.llm_server import json_error
from .fakes.llm_server import oa_finish
from .fakes.llm_server import oa_reasoning
from .fakes.llm_server import oa_text
from .fakes.llm_server import oa_tool
from .fakes.llm_server import oa_usage
from .fakes.llm_server import raw
from .fakes.llm_server import sse
from .fakes.llm_server import stall

CANARY = "sk-canary-7f3a9c1e5b2d4f6a8c0e"
FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.01)
TOOLS = [
    ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {}}}),
    ToolSpec("list_dir", "List a folder", {"type": "object", "properties": {"path": {}}}),
]


def model(llm_server: LLMServer, **kw: Any) -> OpenAIModel:
    kw.setdefault("api_key", CANARY)
    kw.setdefault("retry", FAST)
    return OpenAIModel("test-model", llm_server.base_url + "/v1", **kw)


async def test_request_has_the_wire_shape(llm_server: LLMServer) -> None:
    llm_server.script(sse([oa_text("ok"), oa_finish(), OA_DONE]))
    call = ToolCall("call_1", "read_file", {"path": "a.txt"})
    transcript = [
        Message.system("be brief"),
        Message.user("read a.txt"),
        Message.assistant("", [call]),
        Message.tool_result(call, "contents"),
    ]
    with trio.fail_after(5):
        await model(llm_server).complete(transcript, TOOLS, Collect())
    [request] = llm_server.requests
    assert request.method == "POST"
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {CANARY}"
    body = request.json()
    assert body["model"] == "test-model"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {}}},
        },
    }
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "read a.txt"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "contents"},
    ]


async def test_no_key_sends_no_authorization_to_a_local_server(llm_server: LLMServer) -> None:
    llm_server.script(sse([oa_text("ok"), oa_finish(), OA_DONE]))
    with trio.fail_after(5):
        await model(llm_server, api_key=None).complete([Message.user("hi")], [], Collect())
    assert "authorization" not in llm_server.requests[0].headers


async def test_no_tools_omits_the_tools_field(llm_server: LLMServer) -> None:
    llm_server.script(sse([oa_text("ok"), oa_finish(), OA_DONE]))
    with trio.fail_after(5):
        await model(llm_server).complete([Message.user("hi")], [], Collect())
    assert "tools" not in llm_server.requests[0].json()


async def test_several_tool_calls_split_mid_json(llm_server: LLMServer) -> None:
    llm_server.script(
        sse(
            [
                oa_text("Let me look."),
                oa_tool(0, id="call_a", name="read_file"),
                oa_tool(0, arguments='{"pa'),
                oa_tool(0, arguments='th": "a.'),
                oa_tool(1, id="call_b", name="list_dir", arguments=""),
                oa_tool(0, arguments='txt"}'),
                oa_tool(1, arguments='{"path"'),
                oa_tool(1, arguments=': "/tmp"}'),
                oa_finish("tool_calls"),
                oa_usage(40, 22),
                OA_DONE,
            ]
        )
    )
    got = Collect()
    with trio.fail_after(5):
        response = await model(llm_server).complete([Message.user("go")], TOOLS, got)
    assert response.tool_calls == (
        ToolCall("call_a", "read_file", {"path": "a.txt"}),
        ToolCall("call_b", "list_dir", {"path": "/tmp"}),
    )
    assert response.text == "Let me look."
    assert response.usage == Usage(40, 22)
    tool_deltas = [d for d in got.deltas if isinstance(d, ToolCallDelta)]
    assert tool_deltas[0] == ToolCallDelta(index=0, id="call_a", name="read_file")
    assert "".join(d.arguments for d in tool_deltas if d.index == 0) == '{"path": "a.txt"}'


async def test_stream_cut_at_every_few_bytes_still_parses(llm_server: LLMServer) -> None:
    pieces = [
        oa_tool(0, id="call_a", name="read_file", arguments='{"path": "é.txt"}'),
        oa_text("done ✓"),
        oa_finish("tool_calls"),
        OA_DONE,
    ]
    llm_server.script(sse(pieces, split=3))
    with trio.fail_after(5):
        response = await model(llm_server).complete([Message.user("go")], TOOLS, Collect())
    assert response.tool_calls == (ToolCall("call_a", "read_file", {"path": "é.txt"}),)
    assert response.text == "done ✓"


async def test_deltas_reach_on_delta_before_the_reply_ends(llm_server: LLMServer) -> None:
    first_seen = trio.Event()

    async def handler(exchange: Exchange) -> None:
        await exchange.start()
        await exchange.send(oa_text("first"))
        # The rest is only sent once the client has shown the first piece.
        await first_seen.wait()
        for piece in (oa_text(" second"), oa_finish(), OA_DONE):
            await exchange.send(piece)
        await exchange.end()

    llm_server.script(handler)

    async def on_delta(delta: ModelDelta) -> None:
        first_seen.set()

    with trio.fail_after(5):
        response = await model(llm_server).complete([Message.user("hi")], [], on_delta)
    assert response.text == "first second"


async def test_429_with_a_long_retry_after_is_raised_at_once(llm_server: LLMServer) -> None:
    llm_server.script(json_error(429, {"error": {"message": "quota"}}, {"retry-after": "3600"}))
    with trio.fail_after(5), pytest.raises(ModelRateLimitError, match="rate limited") as info:
        await model(llm_server).complete([Message.user("hi")], [], Collect())
    assert info.value.retry_after == 3600
    assert len(llm_server.requests) == 1


async def test_5xx_is_retried_a_bounded_number_of_times(llm_server: LLMServer) -> None:
    llm_server.script(*[json_error(503, {"error": {"message": "busy"}})] * 5)
    with trio.fail_after(5), pytest.raises(ModelServerError, match="gave up after 3 attempts"):
        await model(llm_server).complete([Message.user("hi")], [], Collect())
    assert len(llm_server.requests) == 3


async def test_connection_refused_says_check_base_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = OpenAIModel("x", f"http://127.0.0.1:{port}/v1", retry=FAST)
    with trio.fail_after(5), pytest.raises(ModelConnectError, match="check the base URL"):
        await m.complete([Message.user("hi")], [], Collect())


async def test_read_timeout_is_a_timeout_error(llm_server: LLMServer) -> None:
    llm_server.script(stall())
    m = model(llm_server, timeout=httpx.Timeout(5.0, read=0.2))
    with trio.fail_after(5), pytest.raises(ModelTimeoutError, match=r"sent nothing for 0.2 s"):
        await m.complete([Message.user("hi")], [], Collect())
    assert len(llm_server.requests) == 1, "a read timeout is not retried"


async def test_never_retries_after_a_delta_was_delivered(llm_server: LLMServer) -> None:
    llm_server.script(cut([oa_text("half")]), sse([oa_text("again"), oa_finish(), OA_DONE]))
    got = Collect()
    with trio.fail_after(5), pytest.raises(ModelStreamCutError):
        await model(llm_server).complete([Message.user("hi")], [], got)
    assert got.deltas == [TextDelta("half")]
    assert len(llm_server.requests) == 1


async def test_mid_stream_error_chunk_is_a_server_error(llm_server: LLMServer) -> None:
    error = b'data: {"error": {"message": "model crashed", "type": "server_error"}}\n\n'
    llm_server.script(sse([oa_text("a"), error]))
    with trio.fail_after(5), pytest.raises(ModelServerError, match="model crashed"):
        await model(llm_server).complete([Message.user("hi")], [], Collect())


async def test_malformed_chunk_is_a_stream_error(llm_server: LLMServer) -> None:
    llm_server.script(sse([b'data: {"choices": [{"delta": \n\n']))
    with trio.fail_after(5), pytest.raises(ModelStreamError, match="not JSON"):
        await model(llm_server).complete([Message.user("hi")], [], Collect())
    assert len(llm_server.requests) == 1


async def test_invalid_tool_arguments_name_the_tool(llm_server: LLMServer) -> None:
    llm_server.script(
        sse([oa_tool(0, id="c", name="read_file", arguments='{"path": '), oa_finish(), OA_DONE])
    )
    with trio.fail_after(5), pytest.raises(ModelStreamError, match=r"'read_file'.*not valid JSON"):
        await model(llm_server).complete([Message.user("hi")], TOOLS, Collect())


async def test_html_instead_of_a_stream_says_check_base_url(llm_server: LLMServer) -> None:
    llm_server.script(raw(200, b"<html>welcome</html>", "text/html"))
    with trio.fail_after(5), pytest.raises(ModelStreamError, match=r"text/html.*base URL"):
        await model(llm_server).complete([Message.user("hi")], [], Collect())


async def test_repr_hides_the_key() -> None:
    m = OpenAIModel("gpt-4o-mini", api_key=CANARY)
    assert CANARY not in repr(m)
    assert m.name == "openai:gpt-4o-mini"


def test_request_body_is_json_serialisable() -> None:
    # Tool arguments are re-encoded as text; guard against handing the API a dict.
    from agentrt.models.openai import openai_messages

    call = ToolCall("c", "t", {"n": 1})
    [msg] = openai_messages([Message.assistant("", [call])])
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"n": 1}


# --------------------------------------------------------------------------- reasoning


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_streams_apart_from_the_answer_and_is_not_sent_back(
    llm_server: LLMServer, field: str
) -> None:
    llm_server.script(
        sse(
            [
                oa_reasoning("The user ", field),
                oa_reasoning("greets me.", field),
                oa_text("Hello!"),
                oa_finish(),
                OA_DONE,
            ]
        ),
        sse([oa_text("Again."), oa_finish(), OA_DONE]),
    )
    got = Collect()
    with trio.fail_after(5):
        first = await model(llm_server).complete([Message.user("hi")], [], got)
        await model(llm_server).complete(
            [Message.user("hi"), first.as_message(), Message.user("and?")], [], Collect()
        )
    assert got.deltas == [
        ReasoningDelta("The user "),
        ReasoningDelta("greets me."),
        TextDelta("Hello!"),
    ]
    assert first.text == "Hello!"
    # DeepSeek refuses reasoning_content in the messages it is sent: none goes back.
    resent = llm_server.requests[1].json()["messages"]
    assert resent[1] == {"role": "assistant", "content": "Hello!"}
    assert "greets me" not in llm_server.requests[1].body.decode()


async def test_cached_prompt_tokens_are_reported_apart(llm_server: LLMServer) -> None:
    llm_server.script(sse([oa_text("ok"), oa_finish(), oa_usage(1500, 7, cached=1024), OA_DONE]))
    with trio.fail_after(5):
        response = await model(llm_server).complete([Message.user("hi")], [], Collect())
    assert response.usage == Usage(input_tokens=1500, output_tokens=7, cache_read_tokens=1024)


async def test_reasoning_tokens_are_reported_apart(llm_server: LLMServer) -> None:
    llm_server.script(
        sse([oa_text("ok"), oa_finish(), oa_usage(900, 300, cached=512, reasoning=256), OA_DONE])
    )
    with trio.fail_after(5):
        response = await model(llm_server).complete([Message.user("hi")], [], Collect())
    assert response.usage == Usage(
        input_tokens=900, output_tokens=300, cache_read_tokens=512, reasoning_tokens=256
    )


# --------------------------------------------------------------------------- max_tokens


async def test_a_length_stop_in_plain_text_keeps_the_text(llm_server: LLMServer) -> None:
    llm_server.script(sse([oa_text("The answer is"), oa_finish("length"), OA_DONE]))
    with trio.fail_after(5):
        response = await model(llm_server).complete([Message.user("q")], [], Collect())
    assert response.text == "The answer is"
    assert "max_tokens" not in llm_server.requests[0].json()


def test_max_tokens_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_tokens must be a positive integer"):
        OpenAIModel("m", "http://127.0.0.1:1/v1", max_tokens=0)


# --------------------------------------------------------------------------- headers


async def test_custom_headers_are_sent_and_override_ours(llm_server: LLMServer) -> None:
    llm_server.script(sse([oa_text("ok"), oa_finish(), OA_DONE]))
    headers = {
        "HTTP-Referer": "https://example.org/agentrt",
        "X-Title": "agentrt",
        "Accept": "text/event-stream; charset=utf-8",
    }
    with trio.fail_after(5):
        await model(llm_server, headers=headers).complete([Message.user("hi")], [], Collect())
    [request] = llm_server.requests
    assert request.headers["http-referer"] == "https://example.org/agentrt"
    assert request.headers["x-title"] == "agentrt"
    assert request.headers["accept"] == "text/event-stream; charset=utf-8"
    assert request.headers["authorization"] == f"Bearer {CANARY}"
    assert "example.org" not in repr(model(llm_server, headers=headers))


async def test_a_gateway_credential_header_is_scrubbed_from_errors(llm_server: LLMServer) -> None:
    gateway = "gw-5e1d9c7b3a2f4e6d"
    llm_server.script(json_error(401, {"error": {"message": f"bad gateway token {gateway}"}}))
    headers = {"cf-aig-authorization": f"Bearer {gateway}"}
    with trio.fail_after(5), pytest.raises(ModelAuthError) as caught:
        await model(llm_server, headers=headers).complete([Message.user("hi")], [], Collect())
    assert llm_server.requests[0].headers["cf-aig-authorization"] == f"Bearer {gateway}"
    assert gateway not in str(caught.value)
    assert "[redacted]" in str(caught.value)


@pytest.mark.parametrize(
    ("headers", "match"),
    [
        ({"X Title": "a"}, "not a valid HTTP header name"),
        ({"X-Title": "a\r\nX-Evil: 1"}, "must be one line"),
    ],
)
def test_a_header_that_cannot_be_sent_is_refused_when_the_model_is_built(
    headers: dict[str, str], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        OpenAIModel("m", "http://127.0.0.1:1/v1", headers=headers)


# --------------------------------------------------------------------------- Azure


async def test_azure_sends_the_api_key_header_and_the_api_version(llm_server: LLMServer) -> None:
    llm_server.script(sse([oa_text("from azure"), oa_finish(), oa_usage(3, 2), OA_DONE]))
    azure = AzureOpenAIModel(
        llm_server.base_url, "gpt-4o-prod", api_key=CANARY, retry=FAST, max_tokens=77
    )
    with trio.fail_after(5):
        response = await azure.complete([Message.user("hi")], TOOLS, Collect())
    assert response.text == "from azure"
    [request] = llm_server.requests
    assert request.path == "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"
    assert request.headers["api-key"] == CANARY
    assert "authorization" not in request.headers
    body = request.json()
    assert "model" not in body  # the deployment picks the model
    assert body["max_completion_tokens"] == 77
    assert body["stream_options"] == {"include_usage": True}
    assert azure.name == "azure:gpt-4o-prod"
    assert CANARY not in repr(azure)


async def test_azure_without_a_key_fails_before_sending(llm_server: LLMServer) -> None:
    azure = AzureOpenAIModel(llm_server.base_url, "dep", api_version="2025-01-01-preview")
    with trio.fail_after(5), pytest.raises(ModelAuthError, match="AZURE_OPENAI_API_KEY"):
        await azure.complete([Message.user("hi")], [], Collect())
    assert llm_server.requests == []


async def test_azure_401_names_the_azure_key_variable(llm_server: LLMServer) -> None:
    llm_server.script(
        json_error(401, {"error": {"code": "401", "message": "Access denied due to invalid key"}})
    )
    azure = AzureOpenAIModel(llm_server.base_url, "dep", api_key=CANARY, retry=FAST)
    with trio.fail_after(5), pytest.raises(ModelAuthError, match="AZURE_OPENAI_API_KEY") as caught:
        await azure.complete([Message.user("hi")], [], Collect())
    assert "Azure OpenAI" in str(caught.value)


def test_make_model_builds_azure_from_its_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrt.models.providers import make_model

    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "az-key-from-env")
    built = make_model("azure:gpt-4o-prod", base_url="https://res.openai.azure.com/")
    assert isinstance(built, AzureOpenAIModel)
    assert built.url == (
        "https://res.openai.azure.com/openai/deployments/gpt-4o-prod/chat/completions"
        "?api-version=2024-10-21"
    )
    assert built._api_key == "az-key-from-env"
    with pytest.raises(ValueError, match="needs the Azure OpenAI endpoint as the base URL"):
        make_model("azure:gpt-4o-prod")
