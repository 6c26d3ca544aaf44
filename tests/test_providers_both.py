"""What the Anthropic and the OpenAI-compatible providers do alike, against a scripted server on
loopback: each test runs once for each provider, a `Wire` giving what differs (the wire format
of a reply and an error, the key's variable)."""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import attrs
import httpx
import pytest
import trio

from agentrt import Message
from agentrt import TextDelta
from agentrt import ToolSpec
from agentrt.models.messages import ModelDelta
from agentrt.models.messages import Usage
from agentrt.models.providers import AnthropicModel
from agentrt.models.providers import ModelAuthError
from agentrt.models.providers import ModelMaxTokensError
from agentrt.models.providers import ModelNotFoundError
from agentrt.models.providers import OpenAIModel
from agentrt.models.providers import RetryPolicy

from .conftest import Collect
from .fakes.llm_server import OA_DONE
from .fakes.llm_server import LLMServer
from .fakes.llm_server import an_end
from .fakes.llm_server import an_error
from .fakes.llm_server import an_event
from .fakes.llm_server import an_start
from .fakes.llm_server import an_text_block
from .fakes.llm_server import an_tool_block
from .fakes.llm_server import cut
from .fakes.llm_server import json_error
from .fakes.llm_server import oa_finish
from .fakes.llm_server import oa_text
from .fakes.llm_server import oa_tool
from .fakes.llm_server import oa_usage
from .fakes.llm_server import sse
from .fakes.llm_server import stall

FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.01)
AN_CANARY = "sk-ant-canary-91c4e7d2a6b8f0e3"
OA_CANARY = "sk-canary-7f3a9c1e5b2d4f6a8c0e"
OA_MASKED = OA_CANARY[:8] + "*" * 10 + OA_CANARY[-4:]
TOOLS = [ToolSpec("read_file", "Read a file", {"type": "object", "properties": {"path": {}}})]

Model = AnthropicModel | OpenAIModel


@attrs.frozen
class Wire:
    """One provider: how it is built and what its server says."""

    name: str
    #: The model on the scripted server, with the canary key and fast retries (and options).
    build: Callable[..., Model]
    #: The model on the hosted API with no key.
    hosted: Callable[[], Model]
    #: A whole reply streaming "Hel", "lo", and the tokens it reports.
    hello: list[bytes]
    hello_usage: Usage
    #: A reply streaming "ok".
    ok: list[bytes]
    #: A reply's opening with one text delta "partial", to stall after.
    partial: list[bytes]
    #: What a cut before any delta has sent.
    before_any_delta: list[bytes]
    #: A reply that stops for max_tokens inside a call of write_file, its JSON cut.
    cut_in_a_call: list[bytes]
    #: The body of a 401 that quotes the key, what the error keeps of it, what it must hide.
    auth_body: Any
    auth_says: str
    auth_match: str
    hidden: Sequence[str]
    #: The body of a 404 for the model `model_name`.
    not_found_body: Any
    model_name: str
    #: A 429 asking to wait, and how many seconds.
    slow_down_body: Any
    retry_after_headers: dict[str, str]
    retry_after: float


ANTHROPIC = Wire(
    name="anthropic",
    build=lambda llm_server, **options: AnthropicModel(
        "claude-test", llm_server.base_url, **{"api_key": AN_CANARY, "retry": FAST, **options}
    ),
    hosted=lambda: AnthropicModel("claude-sonnet-4-5"),
    # A ping among the events is passed over.
    hello=[
        an_start(7),
        an_event("ping"),
        *an_text_block(0, ["Hel", "lo"]),
        *an_end("end_turn", 4),
    ],
    hello_usage=Usage(input_tokens=7, output_tokens=4),
    ok=[an_start(7), *an_text_block(0, ["ok"]), *an_end("end_turn", 4)],
    partial=[an_start(), *an_text_block(0, ["partial"])[:2]],
    before_any_delta=[an_start()],
    cut_in_a_call=[
        an_start(),
        *an_text_block(0, ["Writing."]),
        *an_tool_block(1, "toolu_1", "write_file", ['{"path": "a.txt", "content": "lor']),
        *an_end("max_tokens", 64),
    ],
    auth_body=an_error("authentication_error", f"invalid x-api-key: {AN_CANARY}"),
    auth_says="invalid x-api-key",
    auth_match="ANTHROPIC_API_KEY",
    hidden=[AN_CANARY, AN_CANARY[4:16]],
    not_found_body=an_error("not_found_error", "model: claude-test"),
    model_name="claude-test",
    slow_down_body=an_error("rate_limit_error", "slow down"),
    retry_after_headers={"retry-after": "0.05"},
    retry_after=0.05,
)

OPENAI = Wire(
    name="openai",
    build=lambda llm_server, **options: OpenAIModel(
        "test-model",
        llm_server.base_url + "/v1",
        **{"api_key": OA_CANARY, "retry": FAST, **options},
    ),
    hosted=lambda: OpenAIModel("gpt-4o-mini"),
    hello=[oa_text("Hel"), oa_text("lo"), oa_finish(), oa_usage(12, 3), OA_DONE],
    hello_usage=Usage(input_tokens=12, output_tokens=3),
    ok=[oa_text("ok"), oa_finish(), OA_DONE],
    partial=[oa_text("partial")],
    before_any_delta=[],
    cut_in_a_call=[
        oa_tool(0, id="call_1", name="write_file"),
        oa_tool(0, arguments='{"path": "a.txt", "content": "lorem ip'),
        oa_finish("length"),
        OA_DONE,
    ],
    auth_body={
        "error": {
            "message": f"Incorrect API key provided: {OA_CANARY}. Also known as {OA_MASKED}.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    },
    auth_says="Incorrect API key provided",
    auth_match=r"OPENAI_API_KEY.*'openai_api_key'",
    hidden=[OA_CANARY, OA_CANARY[-12:], OA_MASKED],
    not_found_body={"error": {"message": "model 'test-model' not found", "type": "x"}},
    model_name="test-model",
    slow_down_body={"error": {"message": "slow down"}},
    retry_after_headers={"retry-after-ms": "30"},
    retry_after=0.03,
)


@pytest.fixture(params=[ANTHROPIC, OPENAI], ids=lambda wire: wire.name)
def wire(request: pytest.FixtureRequest) -> Wire:
    chosen: Wire = request.param
    return chosen


async def test_streams_text_and_records_usage(llm_server: LLMServer, wire: Wire) -> None:
    llm_server.script(sse(wire.hello))
    got = Collect()
    with trio.fail_after(5):
        response = await wire.build(llm_server).complete([Message.user("hi")], [], got)
    assert got.deltas == [TextDelta("Hel"), TextDelta("lo")]
    assert response.text == "Hello"
    assert response.tool_calls == ()
    assert response.usage == wire.hello_usage


async def test_cancel_mid_stream_closes_the_connection_at_once(
    llm_server: LLMServer, wire: Wire
) -> None:
    llm_server.script(stall(wire.partial))
    got_delta = trio.Event()

    async def on_delta(delta: ModelDelta) -> None:
        got_delta.set()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def run() -> None:
                with scope:
                    await wire.build(llm_server).complete([Message.user("hi")], [], on_delta)

            nursery.start_soon(run)
            await got_delta.wait()
            exchange = await llm_server.wait_request(1)
            cancelled_at = time.perf_counter()
            scope.cancel()
            await exchange.disconnected.wait()
    assert scope.cancelled_caught
    assert exchange.disconnected_at is not None
    # The close happens inside the cancel, not at some later cleanup or timeout.
    assert exchange.disconnected_at - cancelled_at < 0.5


async def test_401_names_the_key_variable_and_never_the_key(
    llm_server: LLMServer, wire: Wire, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    llm_server.script(json_error(401, wire.auth_body))
    m = wire.build(llm_server)
    with trio.fail_after(5), pytest.raises(ModelAuthError, match=wire.auth_match) as info:
        await m.complete([Message.user("hi")], [], Collect())
    assert wire.auth_says in str(info.value)
    everything = "".join(traceback.format_exception(info.value)) + repr(info.value)
    everything += caplog.text + repr(m)
    for secret in wire.hidden:
        assert secret not in everything
    # Nothing in the exception chain holds on to the request (and its headers).
    chained: BaseException | None = info.value
    while chained is not None:
        assert not isinstance(chained, httpx.HTTPError)
        chained = chained.__cause__ or chained.__context__
    assert len(llm_server.requests) == 1, "an auth failure is not retried"


async def test_hosted_api_without_key_fails_before_sending(wire: Wire) -> None:
    with pytest.raises(ModelAuthError, match=wire.auth_match):
        await wire.hosted().complete([Message.user("hi")], [], Collect())


async def test_404_says_check_the_model_name(llm_server: LLMServer, wire: Wire) -> None:
    llm_server.script(json_error(404, wire.not_found_body))
    with (
        trio.fail_after(5),
        pytest.raises(ModelNotFoundError, match=f"model name '{wire.model_name}'"),
    ):
        await wire.build(llm_server).complete([Message.user("hi")], [], Collect())
    assert len(llm_server.requests) == 1


async def test_429_honours_retry_after_then_succeeds(llm_server: LLMServer, wire: Wire) -> None:
    llm_server.script(
        json_error(429, wire.slow_down_body, wire.retry_after_headers),
        sse(wire.ok),
    )
    started = trio.current_time()
    with trio.fail_after(5):
        response = await wire.build(llm_server).complete([Message.user("hi")], [], Collect())
    assert response.text == "ok"
    assert len(llm_server.requests) == 2
    assert trio.current_time() - started >= wire.retry_after


async def test_a_cut_before_any_delta_is_retried(llm_server: LLMServer, wire: Wire) -> None:
    llm_server.script(cut(wire.before_any_delta), sse(wire.ok))
    with trio.fail_after(5):
        response = await wire.build(llm_server).complete([Message.user("hi")], [], Collect())
    assert response.text == "ok"
    assert len(llm_server.requests) == 2


async def test_a_max_tokens_stop_inside_a_tool_call_says_the_reply_was_cut(
    llm_server: LLMServer, wire: Wire
) -> None:
    llm_server.script(sse(wire.cut_in_a_call))
    model = wire.build(llm_server, max_tokens=64)
    with trio.fail_after(5), pytest.raises(ModelMaxTokensError) as caught:
        await model.complete([Message.user("write")], TOOLS, Collect())
    message = str(caught.value)
    assert message.startswith("the reply was cut at max_tokens (64)")
    assert "'write_file'" in message
    assert "JSON" not in message
    # Asking again the same way would stop at the same place: no retry.
    assert len(llm_server.requests) == 1
    assert llm_server.requests[0].json()["max_tokens"] == 64
